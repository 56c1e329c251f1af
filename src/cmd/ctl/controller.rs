//! `inagg ctl --controller ADDR`: the operator CLI as the controller's
//! client. Jobs by name; the controller places pools and installs them.

use inagg_netio::tls::ClientTls;
use std::io::Write;
use std::net::SocketAddr;

use super::jobs::{group_decl, GroupCommand, JobCommand};
use super::output::{emit, emit_plan, endpoints, table, usage};
use super::{describe_faults, CtlCommand, TenantCommand};
use inagg_controller_api::{Caller, Client, ClientError, Event, SiteFaults};
use inagg_controller_api::{
    GroupStatus, JobStatus, Placement, SiteStats, SiteStatus, TenantDecl, TenantStatus,
};
use inagg_switch_control::target::{ControlError, Result};

/// Runs one ctl command against the controller.
pub fn run(
    addr: SocketAddr,
    (token, tls): (Option<String>, Option<ClientTls>),
    json: bool,
    command: CtlCommand,
    out: &mut dyn Write,
) -> Result<()> {
    let mut c = Client::connect_tls(addr, token, tls.as_ref()).map_err(controller_error)?;
    match command {
        CtlCommand::Job(cmd) => job(&mut c, cmd, json, out),
        CtlCommand::Tenant(cmd) => tenant(&mut c, cmd, json, out),
        CtlCommand::Whoami => {
            let caller = c.whoami().map_err(controller_error)?;
            emit(out, json, &caller, |o| writeln!(o, "{caller}"))
        }
        CtlCommand::Faults(args) => {
            let sites = c.faults().map_err(controller_error)?;
            let held = sites
                .iter()
                .find(|s| args.site.map_or(s.role == "switch", |a| s.control == a))
                .map(|s| s.intended)
                .unwrap_or_default();
            let Some(f) = args.applied_to(held)? else {
                return emit(out, json, &sites, |o| write_faults(o, &sites));
            };
            c.set_faults(args.site, f).map_err(controller_error)?;
            let on = args.site.map_or("the switch".into(), |a| a.to_string());
            emit(out, json, &f, |o| {
                writeln!(o, "{on} held to {}", describe_faults(&f))
            })
        }
        CtlCommand::Events { last } => {
            let events = c.events(last).map_err(controller_error)?;
            emit(out, json, &events, |o| write_events(o, &events))
        }
        CtlCommand::Group(cmd) => group(&mut c, cmd, json, out),
        CtlCommand::Sites | CtlCommand::Pool => {
            let sites = c.sites().map_err(controller_error)?;
            let jobs = c.jobs().map_err(controller_error)?;
            emit(
                out,
                json,
                &serde_json::json!({ "sites": sites, "jobs": jobs }),
                |o| write_sites(o, &sites, &jobs),
            )
        }
        CtlCommand::Counters { reset: false } => {
            let sites = c.stats().map_err(controller_error)?;
            emit(out, json, &sites, |o| write_stats(o, &sites))
        }
        CtlCommand::Priority { class, queue } => {
            c.set_priority(class, queue).map_err(controller_error)?;
            emit(
                out,
                json,
                &serde_json::json!({ "class": class, "queue": queue }),
                |o| {
                    writeln!(
                        o,
                        "priority class {class} -> queue {queue} on every aggregator"
                    )
                },
            )
        }
        CtlCommand::Apply {
            file,
            prune,
            dry_run,
        } => {
            use inagg_controller::file::{execute, plan, ControllerFile};
            let parsed = ControllerFile::load(&file)?;
            let changes = plan(&parsed, &file, &mut c, prune)?;
            if !dry_run {
                execute(&changes, &mut c)?;
            }
            emit_plan(out, json, dry_run, "changes", &changes)
        }
        _ => Err(ControlError::Unsupported {
            target: "controller",
            what: "this command yet; run it against the switch directly (without --controller)",
        }),
    }
}

fn job(c: &mut Client, cmd: JobCommand, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        JobCommand::Create(create) => {
            let decl = create.decl()?;
            let job = c.create_job(decl).map_err(controller_error)?;
            emit(out, json, &job, |o| {
                writeln!(
                    o,
                    "created job {:?} (id {}): {}",
                    job.decl.name,
                    job.id,
                    placement(&job)
                )
            })
        }
        JobCommand::List => {
            let jobs = c.jobs().map_err(controller_error)?;
            emit(out, json, &jobs, |o| write_jobs(o, &jobs))
        }
        JobCommand::Show { job } => {
            let jobs = c.jobs().map_err(controller_error)?;
            let j = jobs
                .into_iter()
                .find(|j| j.decl.name == job)
                .ok_or_else(|| usage(&format!("no job {job:?} (inagg ctl job list shows them)")))?;
            emit(out, json, &j, |o| {
                write_jobs(o, std::slice::from_ref(&j))?;
                if !j.decl.queues.is_empty() {
                    let map = inagg_switch_api::queues::describe_map(&j.decl.queues);
                    writeln!(o, "  priority map  {map}")?;
                }
                Ok(())
            })
        }
        JobCommand::Delete { job } => {
            c.delete_job(&job).map_err(controller_error)?;
            emit(out, json, &serde_json::json!({ "deleted": job }), |o| {
                writeln!(o, "deleted job {job:?}")
            })
        }
    }
}

fn tenant(c: &mut Client, cmd: TenantCommand, json: bool, out: &mut dyn Write) -> Result<()> {
    let issued = |out: &mut dyn Write, (t, credential): (TenantStatus, String)| {
        emit(
            out,
            json,
            &serde_json::json!({ "tenant": t, "credential": credential }),
            |o| {
                write_tenants(o, std::slice::from_ref(&t))?;
                writeln!(o, "credential: {credential}")?;
                writeln!(
                    o,
                    "(shown this once; the controller keeps only its hash. Agents pass it as \
                     --token, or INAGG_TOKEN)"
                )
            },
        )
    };
    match cmd {
        TenantCommand::Create {
            name,
            slots,
            queues,
        } => {
            let decl = TenantDecl {
                name,
                slots,
                queues,
            };
            issued(out, c.create_tenant(decl).map_err(controller_error)?)
        }
        TenantCommand::Rotate { name } => {
            issued(out, c.rotate_tenant(&name).map_err(controller_error)?)
        }
        TenantCommand::List => {
            let tenants = c.tenants().map_err(controller_error)?;
            emit(out, json, &tenants, |o| write_tenants(o, &tenants))
        }
        TenantCommand::Delete { name } => {
            c.delete_tenant(&name).map_err(controller_error)?;
            emit(out, json, &serde_json::json!({ "deleted": name }), |o| {
                writeln!(o, "deleted tenant {name:?} and its credential")
            })
        }
    }
}

fn write_tenants(o: &mut dyn Write, tenants: &[TenantStatus]) -> std::io::Result<()> {
    let header = format!("{:<16} {:>11} {:>9}  JOBS", "NAME", "SLOTS", "QUEUES");
    table(o, &header, tenants, "(no tenants)", |t| {
        format!(
            "{:<16} {:>11} {:>9}  {}",
            t.decl.name,
            format!("{}/{}", t.slots_used, t.decl.slots),
            format!("{}/{}", t.queues_used, t.decl.queues),
            t.jobs.join(",")
        )
    })
}

/// Each aggregator's faults: what the controller holds it to, who set
/// them, and what it had at the last look.
fn write_faults(o: &mut dyn Write, sites: &[SiteFaults]) -> std::io::Result<()> {
    for s in sites {
        writeln!(o, "{} {}", s.role, s.control)?;
        writeln!(o, "  held to  {}", describe_faults(&s.intended))?;
        match s.found {
            Some(found) if found != s.intended => {
                writeln!(o, "  found    {} (put back)", describe_faults(&found))?
            }
            Some(_) => writeln!(o, "  found    the same")?,
            None => writeln!(o, "  found    nothing to read (down, or no faults)")?,
        }
        match &s.set_by {
            Some(by) => writeln!(
                o,
                "  set by   {} from {} at {}",
                by.caller,
                by.peer,
                utc(by.at_ms)
            )?,
            None => writeln!(
                o,
                "  set by   nobody: what it had when the controller first reached it"
            )?,
        }
    }
    Ok(())
}

/// The audit as a table: when (UTC), who, from where, what, and what came
/// of it.
fn write_events(o: &mut dyn Write, events: &[Event]) -> std::io::Result<()> {
    let header = format!(
        "{:>6}  {:<24} {:<16} {:<21}  WHAT -> OUTCOME",
        "SEQ", "TIME (UTC)", "WHO", "FROM"
    );
    table(o, &header, events, "(no audit entries)", |e| {
        let who = match &e.caller {
            Caller::Operator => "operator",
            Caller::Tenant { name } => name.as_str(),
        };
        let outcome = match &e.refused {
            None => "done".to_string(),
            Some(why) => format!("REFUSED: {why}"),
        };
        format!(
            "{:>6}  {:<24} {:<16} {:<21}  {} -> {outcome}",
            e.seq,
            utc(e.at_ms),
            who,
            e.peer.to_string(),
            e.what
        )
    })
}

/// Milliseconds since the Unix epoch as an ISO 8601 UTC time, e.g.
/// `2026-12-06T23:59:01.123Z` (the civil-from-days conversion of the
/// proleptic Gregorian calendar).
fn utc(at_ms: u64) -> String {
    let (days, ms) = (at_ms / 86_400_000, at_ms % 86_400_000);
    let z = i64::try_from(days).unwrap_or(i64::MAX / 2) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

fn group(c: &mut Client, cmd: GroupCommand, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        GroupCommand::Create { id, name, members } => {
            let g = c
                .create_group(group_decl(id, name, members)?)
                .map_err(controller_error)?;
            emit(out, json, &g, |o| {
                writeln!(
                    o,
                    "created multicast group {:?} (id {}) with {} members",
                    g.name,
                    g.id,
                    g.members.len()
                )
            })
        }
        GroupCommand::List => {
            let groups = c.groups().map_err(controller_error)?;
            emit(out, json, &groups, |o| write_groups(o, &groups))
        }
        GroupCommand::Delete { group } => {
            c.delete_group(&group).map_err(controller_error)?;
            emit(out, json, &serde_json::json!({ "deleted": group }), |o| {
                writeln!(o, "deleted multicast group {group:?}")
            })
        }
    }
}

fn write_groups(o: &mut dyn Write, groups: &[GroupStatus]) -> std::io::Result<()> {
    let header = format!(
        "{:<16} {:>5} {:>5} {:>7} {:>9} {:>10} {:>10}  MEMBERS",
        "NAME", "ID", "OWNER", "MEMBERS", "STATE", "PACKETS", "COPIES"
    );
    table(o, &header, groups, "(no multicast groups)", |g| {
        format!(
            "{:<16} {:>5} {:>5} {:>7} {:>9} {:>10} {:>10}  {}",
            g.name,
            g.id,
            g.owner,
            g.members.len(),
            if g.installed { "installed" } else { "pending" },
            g.packets,
            g.copies,
            endpoints(&g.members)
        )
    })
}

/// Where a job runs, in words, with a partial grant's request.
fn placement(j: &JobStatus) -> String {
    match j.placement {
        Placement::Switch { grant } if grant.size < j.decl.slots => {
            format!("{} (asked {}: partial grant)", j.placement, j.decl.slots)
        }
        p => p.to_string(),
    }
}

fn write_jobs(o: &mut dyn Write, jobs: &[JobStatus]) -> std::io::Result<()> {
    let header = format!(
        "{:<16} {:<16} {:>5} {:>9} {:>4} {:>9}  PLACEMENT",
        "NAME", "TENANT", "ID", "WORKERS", "GEN", "STATE"
    );
    table(o, &header, jobs, "(no jobs)", |j| {
        let state = if j.installed {
            "installed".to_string()
        } else if j.refused.is_some() {
            "REFUSED".to_string()
        } else if j.down.is_some() {
            "AGG DOWN".to_string()
        } else {
            format!("{}/{} reg", j.registered, j.decl.workers)
        };
        format!(
            "{:<16} {:<16} {:>5} {:>9} {:>4} {:>9}  {}",
            j.decl.name,
            j.tenant.as_deref().unwrap_or("-"),
            j.id,
            j.decl.workers,
            j.generation,
            state,
            placement(j)
        )
    })?;
    for j in jobs {
        if let Some(why) = &j.refused {
            writeln!(
                o,
                "job {:?} was refused where it is placed: {why}",
                j.decl.name
            )?;
        } else if let Some(why) = &j.down {
            writeln!(
                o,
                "job {:?} waits for its aggregator, which is down: {why}",
                j.decl.name
            )?;
        }
    }
    Ok(())
}

fn write_sites(o: &mut dyn Write, sites: &[SiteStatus], jobs: &[JobStatus]) -> std::io::Result<()> {
    for s in sites {
        let state = if s.up {
            "up".to_string()
        } else {
            format!("DOWN ({})", s.error.as_deref().unwrap_or("not reached yet"))
        };
        writeln!(o, "{} {} at {}: {state}", s.role, s.kind, s.control)?;
        if let (Some(slots), Some(free)) = (s.slots, s.free) {
            let ranges: Vec<String> = s
                .free_ranges
                .iter()
                .map(|r| format!("[{}, {})", r.base, r.end()))
                .collect();
            writeln!(o, "  {free} of {slots} slots free: {}", ranges.join(" "))?;
        }
        if let Some(k) = &s.elements {
            writeln!(o, "  {k} elements per packet")?;
        }
        if let Some((total, used)) = s.memory {
            writeln!(
                o,
                "  {} of {} of value memory taken by its pools",
                inagg_switch_api::size_text(used),
                inagg_switch_api::size_text(total)
            )?;
        }
    }
    write_jobs(o, jobs)
}

fn write_stats(o: &mut dyn Write, sites: &[SiteStats]) -> std::io::Result<()> {
    for s in sites {
        writeln!(o, "{} at {}", s.role, s.control)?;
        match &s.counters {
            Err(e) => writeln!(o, "  unreadable: {e}")?,
            Ok(c) => {
                writeln!(
                    o,
                    "  rx {} packets {} bytes; tx {} packets {} bytes",
                    c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes
                )?;
                let drops: Vec<String> = inagg_switch_api::counters::DropReason::ALL
                    .iter()
                    .filter(|r| c.dropped(**r) > 0)
                    .map(|r| format!("{} {}", r.name(), c.dropped(*r)))
                    .collect();
                writeln!(
                    o,
                    "  drops: {}",
                    if drops.is_empty() {
                        "none".into()
                    } else {
                        drops.join(", ")
                    }
                )?;
            }
        }
        for j in &s.jobs {
            let c = &j.counters;
            writeln!(
                o,
                "  job {:<16} (id {:>5})  contributions {}  results {}  resent {}  duplicates {}  dropped {}",
                j.name.as_deref().unwrap_or("?"),
                j.id,
                c.contributions,
                c.results,
                c.resent_results,
                c.duplicates,
                c.dropped
            )?;
        }
    }
    Ok(())
}

/// The controller's answer (or silence) as the ctl's error, its message kept.
fn controller_error(e: ClientError) -> ControlError {
    ControlError::Controller(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn audit_times_are_iso_8601_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }
}
