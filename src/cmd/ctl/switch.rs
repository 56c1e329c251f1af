//! `inagg ctl` straight to a switch (the emulator or bmv2, through the
//! control plane's `Target`): every noun, and the tables of what the
//! switch reports.

use std::io::Write;

use inagg_switch_api::counters::{Counters, DropReason};
use inagg_switch_api::queues::{describe_map, EGRESS_QUEUES};
use inagg_switch_api::{ApiError, GroupInfo, JobInfo, PoolMap};
use inagg_switch_control::cluster::{self, ClusterFile};
use inagg_switch_control::target::{install_job, ControlError, QueueReport, Result, Target};

use super::jobs::{group_id, group_spec, job_id, GroupCommand, JobCommand};
use super::output::{emit, emit_plan, endpoints, table, usage};
use super::{describe_faults, relay, CtlCommand};

/// Runs `command` on the switch behind `t`. `cluster_file` is `apply`'s
/// file, read before connecting (its `[switch]` table says where to).
pub fn run(
    t: &mut dyn Target,
    command: CtlCommand,
    cluster_file: Option<ClusterFile>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    match command {
        CtlCommand::Info => {
            let info = t.info()?;
            let data = t.data_addr()?;
            emit(
                out,
                json,
                &serde_json::json!({ "target": t.kind(), "info": info, "data_addr": data }),
                |o| {
                    writeln!(o, "target        {}", t.kind())?;
                    writeln!(
                        o,
                        "data plane    {}",
                        data.map_or("-".into(), |a| a.to_string())
                    )?;
                    writeln!(o, "slots         {}", info.slots)?;
                    let only = if info.fixed_elements {
                        " (the only K)"
                    } else {
                        ""
                    };
                    writeln!(o, "max elements  {}{only}", info.max_elements)?;
                    if info.memory != u64::MAX {
                        writeln!(
                            o,
                            "memory        {} of {} used",
                            inagg_switch_api::size_text(info.memory_used),
                            inagg_switch_api::size_text(info.memory)
                        )?;
                    }
                    writeln!(o, "jobs          {}", info.jobs)
                },
            )
        }
        CtlCommand::Job(cmd) => run_job(cmd, t, json, out),
        CtlCommand::Group(cmd) => run_group(cmd, t, json, out),
        CtlCommand::Relay(cmd) => relay::run(cmd, t, json, out),
        CtlCommand::Pool => {
            let pools = t.pools()?;
            emit(out, json, &pools, |o| write_pools(o, &pools))
        }
        CtlCommand::Counters { reset } => {
            let counters = t.counters()?;
            let jobs = t.jobs()?;
            if reset {
                t.reset_counters()?;
            }
            emit(
                out,
                json,
                &serde_json::json!({ "switch": counters_json(&counters), "jobs": jobs }),
                |o| write_counters(o, &counters, &jobs),
            )
        }
        CtlCommand::Faults(args) => {
            if args.site.is_some() {
                return Err(usage(
                    "--site picks an aggregator of a controller: give --controller",
                ));
            }
            let mut f = t.faults()?;
            if let Some(changed) = args.applied_to(f)? {
                t.set_faults(changed)?;
                f = changed;
            }
            emit(out, json, &f, |o| writeln!(o, "{}", describe_faults(&f)))
        }
        CtlCommand::Queues => {
            let report = t.queues()?;
            let kind = t.kind();
            emit(out, json, &report, |o| write_queues(o, kind, &report))
        }
        CtlCommand::Sites => Err(ControlError::Unsupported {
            target: t.kind(),
            what: "sites (they are the controller's: pass --controller ADDR)",
        }),
        CtlCommand::Tenant(_) | CtlCommand::Whoami => Err(ControlError::Unsupported {
            target: t.kind(),
            what: "tenants (they are the controller's: pass --controller ADDR)",
        }),
        CtlCommand::Events { .. } => Err(ControlError::Unsupported {
            target: t.kind(),
            what: "an audit (it is the controller's: pass --controller ADDR)",
        }),
        CtlCommand::PortRate { port, rate } => {
            let rate_bps = parse_port_rate(&rate)?;
            t.set_port_rate(port, rate_bps)?;
            let shown = rate_bps.map_or("the line rate".to_string(), |r| {
                format!("{} Gbit/s", r as f64 / 1e9)
            });
            emit(
                out,
                json,
                &serde_json::json!({ "port": port, "rate_bps": rate_bps }),
                |o| writeln!(o, "port {port} -> {shown}"),
            )
        }
        CtlCommand::Priority { class, queue } => {
            t.set_priority_queue(class, queue)?;
            emit(
                out,
                json,
                &serde_json::json!({ "class": class, "queue": queue }),
                |o| writeln!(o, "priority class {class} -> queue {queue}"),
            )
        }
        CtlCommand::Apply {
            file,
            prune,
            dry_run,
        } => {
            // Loaded above, before connecting (the load here is never reached).
            let parsed = match cluster_file {
                Some(parsed) => parsed,
                None => ClusterFile::load(&file)?,
            };
            let steps = cluster::plan(&parsed, &file, t, prune)?;
            if !dry_run {
                cluster::execute(&steps, t)?;
            }
            emit_plan(out, json, dry_run, "steps", &steps)
        }
    }
}

fn run_job(cmd: JobCommand, t: &mut dyn Target, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        JobCommand::Create(create) => {
            let spec = create.spec()?;
            let (id, elements) = (spec.id, spec.elements);
            install_job(t, &spec)?;
            emit(out, json, &spec, |o| {
                writeln!(
                    o,
                    "created job {id}: pool [{}, {}) k={elements}",
                    spec.pool_base,
                    spec.pool_end()
                )
            })
        }
        JobCommand::List => {
            let jobs = t.jobs()?;
            emit(out, json, &jobs, |o| write_jobs(o, &jobs))
        }
        JobCommand::Show { job } => {
            let job = t.job(job_id(&job)?)?;
            emit(out, json, &job, |o| write_job(o, &job))
        }
        JobCommand::Delete { job } => {
            let id = job_id(&job)?;
            t.delete_job(id)?;
            emit(out, json, &serde_json::json!({ "deleted": id }), |o| {
                writeln!(o, "deleted job {id}")
            })
        }
    }
}

fn run_group(cmd: GroupCommand, t: &mut dyn Target, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        GroupCommand::Create { id, name, members } => {
            let spec = group_spec(id, name, members)?;
            let id = spec.id;
            t.create_group(&spec)?;
            emit(out, json, &spec, |o| {
                writeln!(
                    o,
                    "created multicast group {id} with {} members",
                    spec.members.len()
                )
            })
        }
        GroupCommand::List => {
            let groups = t.groups()?;
            emit(out, json, &groups, |o| write_groups(o, &groups))
        }
        GroupCommand::Delete { group } => {
            let id = group_id(&group)?;
            t.delete_group(id)?;
            emit(out, json, &serde_json::json!({ "deleted": id }), |o| {
                writeln!(o, "deleted multicast group {id}")
            })
        }
    }
}

/// The switch's group table: id, owner, members, counters.
fn write_groups(o: &mut dyn Write, groups: &[GroupInfo]) -> std::io::Result<()> {
    let header = format!(
        "{:>5}  {:<16}  {:>7}  {:>10}  {:>10}  MEMBERS",
        "GROUP", "OWNER", "MEMBERS", "PACKETS", "COPIES"
    );
    table(o, &header, groups, "(no multicast groups)", |g| {
        let owner = g
            .job
            .map_or_else(|| "by hand".to_string(), |j| format!("job {j}"));
        format!(
            "{:>5}  {:<16}  {:>7}  {:>10}  {:>10}  {}",
            g.id,
            owner,
            g.members.len(),
            g.packets,
            g.copies,
            endpoints(&g.members)
        )
    })
}

fn counters_json(c: &Counters) -> serde_json::Value {
    let drops: serde_json::Map<String, serde_json::Value> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), c.dropped(*r).into()))
        .collect();
    serde_json::json!({
        "rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes,
        "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes,
        "injected_duplicates": c.injected_duplicates, "injected_reorders": c.injected_reorders,
        "relayed": c.relayed, "neighbours_refused": c.neighbours_refused,
        "drops": drops,
    })
}

fn write_jobs(o: &mut dyn Write, jobs: &[JobInfo]) -> std::io::Result<()> {
    let header = format!(
        "{:>5}  {:>7}  {:>13}  {:>5}  {:>3}  {:>12}  {:>10}",
        "JOB", "WORKERS", "POOL", "K", "GEN", "CONTRIB", "RESULTS"
    );
    table(o, &header, jobs, "(no jobs)", |j| {
        let s = &j.spec;
        format!(
            "{:>5}  {:>7}  {:>13}  {:>5}  {:>3}  {:>12}  {:>10}",
            s.id,
            s.workers.len(),
            format!("[{}, {})", s.pool_base, s.pool_end()),
            s.elements,
            s.generation,
            j.counters.contributions,
            j.counters.results
        )
    })
}

fn write_job(o: &mut dyn Write, j: &JobInfo) -> std::io::Result<()> {
    let s = &j.spec;
    let c = &j.counters;
    writeln!(
        o,
        "job {}  pool [{}, {})  k={}  generation {}",
        s.id,
        s.pool_base,
        s.pool_end(),
        s.elements,
        s.generation
    )?;
    for (i, w) in s.workers.iter().enumerate() {
        let switch = i < 64 && s.child_switches & (1 << i) != 0;
        let note = if switch { "  (child switch)" } else { "" };
        writeln!(o, "  worker {i:>3}  {w}{note}")?;
    }
    if !s.queues.is_empty() {
        writeln!(o, "  priority map  {}", describe_map(&s.queues))?;
    }
    if let Some(g) = s.group {
        writeln!(o, "  multicast group {g}")?;
    }
    if let Some(up) = s.upstream {
        writeln!(
            o,
            "  upstream  switch {}  job {}  as member {}  (sent up {}, again {})",
            up.switch, up.job, up.member, c.upstream, c.upstream_resent
        )?;
        if let Some(aux) = up.aux {
            writeln!(
                o,
                "  auxiliary path  via {}  busy bound {}  queue length {}  (detours sent {})",
                aux.via, aux.busy_bound, aux.queue_length, c.detours_sent
            )?;
        }
    }
    for d in &s.detours {
        writeln!(o, "  detours of member {} from relay {}", d.member, d.relay)?;
    }
    if !s.detours.is_empty() {
        writeln!(o, "  detours taken {}", c.detours_taken)?;
    }
    writeln!(
        o,
        "  contributions {}  results {}  resent {}  duplicates {}  dropped {}",
        c.contributions, c.results, c.resent_results, c.duplicates, c.dropped
    )
}

fn write_pools(o: &mut dyn Write, p: &PoolMap) -> std::io::Result<()> {
    writeln!(o, "{:>13}  {:>6}  OWNER", "SLOTS", "SIZE")?;
    for r in &p.ranges {
        let owner = r.job.map_or("free".to_string(), |j| format!("job {j}"));
        writeln!(
            o,
            "{:>13}  {:>6}  {owner}",
            format!("[{}, {})", r.base, r.base + r.size),
            r.size
        )?;
    }
    writeln!(o, "{} of {} slots free", p.free, p.slots)
}

fn write_counters(o: &mut dyn Write, c: &Counters, jobs: &[JobInfo]) -> std::io::Result<()> {
    writeln!(
        o,
        "rx {} packets {} bytes; tx {} packets {} bytes",
        c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes
    )?;
    writeln!(
        o,
        "injected: {} duplicates, {} reorders; relayed {} detours; {} neighbours refused",
        c.injected_duplicates, c.injected_reorders, c.relayed, c.neighbours_refused
    )?;
    writeln!(o, "drops:")?;
    for r in DropReason::ALL {
        writeln!(o, "  {:<18} {}", r.name(), c.dropped(r))?;
    }
    write_jobs(o, jobs)
}

/// `default` (the line rate) or a positive number of Gbit/s.
fn parse_port_rate(rate: &str) -> Result<Option<u64>> {
    if rate == "default" {
        return Ok(None);
    }
    match rate.parse::<f64>() {
        Ok(g) if g.is_finite() && g > 0.0 => Ok(Some((g * 1e9) as u64)),
        _ => Err(ControlError::Api(ApiError::Invalid {
            message: format!(
                "port rate {rate:?}: give Gbit/s (e.g. 0.05 for 50 Mbit/s) or `default`"
            ),
        })),
    }
}

fn write_queues(o: &mut dyn Write, kind: &str, r: &QueueReport) -> std::io::Result<()> {
    match r.link {
        Some(l) => writeln!(
            o,
            "ports paced at {} Gbit/s, {} bytes per queue",
            l.rate_bps as f64 / 1e9,
            l.queue_bytes
        )?,
        None if kind == "emu" => writeln!(o, "ports not paced (no line rate): queues never build")?,
        None => writeln!(
            o,
            "{kind}'s own queues: {EGRESS_QUEUES} strict-priority queues per port, queue {} first",
            EGRESS_QUEUES - 1
        )?,
    }
    if r.map.is_empty() {
        writeln!(o, "every priority class on queue 0")?;
    } else {
        let map: Vec<String> = r
            .map
            .iter()
            .map(|m| format!("{}->{}", m.class, m.queue))
            .collect();
        writeln!(o, "class -> queue: {} (others on 0)", map.join(" "))?;
    }
    if r.ports.is_empty() {
        return Ok(());
    }
    writeln!(
        o,
        "{:<22} {:>5} {:>10} {:>12} {:>8} {:>10} {:>10}",
        "port", "queue", "packets", "bytes", "drops", "depth", "max depth"
    )?;
    for p in r
        .ports
        .iter()
        .filter(|p| r.link.is_some_and(|l| l.rate_bps != p.rate_bps))
    {
        writeln!(
            o,
            "port {} paced at {} Gbit/s",
            p.port,
            p.rate_bps as f64 / 1e9
        )?;
    }
    for p in &r.ports {
        if let Some(rate) = p.train_rate_bps() {
            writeln!(
                o,
                "port {} measured {:.3} Gbit/s back to back ({} bytes timed)",
                p.port,
                rate / 1e9,
                p.train_bytes
            )?;
        }
    }
    for p in &r.ports {
        for (q, s) in p.queues.iter().enumerate() {
            if s.tx_packets + s.drops + s.max_depth_bytes as u64 == 0 {
                continue;
            }
            writeln!(
                o,
                "{:<22} {:>5} {:>10} {:>12} {:>8} {:>10} {:>10}",
                p.port.to_string(),
                q,
                s.tx_packets,
                s.tx_bytes,
                s.drops,
                s.depth_bytes,
                s.max_depth_bytes
            )?;
        }
    }
    Ok(())
}
