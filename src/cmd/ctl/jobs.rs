//! The job and group verbs of `inagg ctl`, and the one reading of their
//! flags for both ways of running them: straight to a switch a job is an
//! id and a pool ([`JobSpec`]), through a controller a name and a size
//! ([`JobDecl`]); a group is an id, or a name. Each flag belongs to one way
//! or to both, and [`Create`] checks them from one table, so the two ways
//! refuse a misplaced flag in the same words.

use std::net::SocketAddr;

use clap::{Args, Subcommand};
use inagg_controller_api::{GroupDecl, JobDecl};
use inagg_switch_api::queues::ClassQueue;
use inagg_switch_api::{AuxPath, Detour, GroupSpec, JobSpec, Upstream};
use inagg_switch_control::target::Result;

use super::output::usage;

/// Which way a command goes: straight to a switch, or through a
/// controller (`--controller ADDR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The switch itself (`--target`, `--addr`).
    Switch,
    /// `inagg controller`.
    Controller,
}

/// Job verbs. (`Create` is much the largest; a command line is parsed
/// once, so it is not boxed.)
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum JobCommand {
    /// Install a job. Directly: --id, --workers ENDPOINTS, --pool-base,
    /// --pool-size. Through --controller: --name, --count, --slots (the
    /// controller places the pool; workers register, or give --workers).
    Create(Create),
    /// List jobs.
    #[command(alias = "ls")]
    List,
    /// One job in detail.
    Show {
        /// Job id (with --controller: its name).
        job: String,
    },
    /// Remove a job and free its pool.
    #[command(alias = "rm")]
    Delete {
        /// Job id (with --controller: its name).
        job: String,
    },
}

/// `inagg ctl job create`.
#[derive(Debug, Args)]
pub struct Create {
    /// Job id (0-65535; direct only).
    #[arg(long)]
    pub id: Option<u16>,
    /// Job name (with --controller).
    #[arg(long)]
    pub name: Option<String>,
    /// Workers in the job (with --controller).
    #[arg(long)]
    pub count: Option<u16>,
    /// Slots to ask for (with --controller); fewer may be granted.
    #[arg(long)]
    pub slots: Option<u32>,
    /// With --controller: wait for free slots instead of running on a
    /// fallback emulator when the switch is full.
    #[arg(long)]
    pub no_fallback: bool,
    /// Worker endpoints, comma-separated (worker id = position).
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<SocketAddr>,
    /// First slot of the pool (direct only).
    #[arg(long)]
    pub pool_base: Option<u32>,
    /// Slots in the pool (direct only).
    #[arg(long)]
    pub pool_size: Option<u32>,
    /// Elements per packet (K).
    #[arg(long, default_value_t = 64)]
    pub elements: u16,
    /// Membership generation (direct only).
    #[arg(long, default_value_t = 0)]
    pub generation: u16,
    /// This job's priority class -> egress queue map, CLASS=QUEUE,
    /// repeatable or comma-separated (`--class-queue 5=7,1=0`).
    #[arg(
        long = "class-queue",
        value_name = "CLASS=QUEUE",
        value_delimiter = ','
    )]
    pub class_queue: Vec<ClassQueue>,
    /// The multicast group for the job's results (direct only; the
    /// controller allocates one) [default: the target's pick].
    #[arg(long)]
    pub group: Option<u16>,
    /// Make the job a node of an aggregation tree (direct only; the
    /// emulator and bmv2): complete slots' partial sums go up to job JOB
    /// of the switch at SWITCH, as its member MEMBER, and the results
    /// it sends back go down to the workers (docs/PROTOCOL.md,
    /// "Aggregation trees").
    #[arg(long, value_name = "SWITCH/JOB/MEMBER")]
    pub upstream: Option<Upstream>,
    /// With --upstream (emulator and bmv2): when more than BUSY_BOUND
    /// packets wait on the port to the parent, send partial sums as
    /// detours to the switch at VIA while fewer than QUEUE_LENGTH wait
    /// on its port (NetStorm's PRIMARY_BUSY_BOUND and
    /// AUXILIARY_QUEUE_LENGTH) [default bounds: 2/1].
    #[arg(
        long,
        value_name = "VIA[/BUSY_BOUND/QUEUE_LENGTH]",
        requires = "upstream"
    )]
    pub aux_path: Option<AuxPath>,
    /// Take member MEMBER's detours when they arrive from the switch
    /// at RELAY (the last hop of its auxiliary path); repeatable or
    /// comma-separated.
    #[arg(long, value_name = "MEMBER=RELAY", value_delimiter = ',')]
    pub detour: Vec<Detour>,
    /// Member MEMBER of --workers is a child switch of an aggregation
    /// tree (direct only; the emulator and bmv2): it takes the job's
    /// results but not the statuses sent to the members a round waits
    /// for (docs/PROTOCOL.md, "Loss recovery"); repeatable or
    /// comma-separated.
    #[arg(long, value_name = "MEMBER", value_delimiter = ',', value_parser = clap::value_parser!(u8).range(0..64))]
    pub child_switch: Vec<u8>,
}

impl Create {
    /// The flags given on the command line that `via` does not take.
    fn misplaced(&self, via: Via) -> Vec<&'static str> {
        let switch_only = [
            ("--id", self.id.is_some()),
            ("--pool-base", self.pool_base.is_some()),
            ("--pool-size", self.pool_size.is_some()),
            ("--generation", self.generation != 0),
            ("--group", self.group.is_some()),
            ("--upstream", self.upstream.is_some()),
            ("--aux-path", self.aux_path.is_some()),
            ("--detour", !self.detour.is_empty()),
            ("--child-switch", !self.child_switch.is_empty()),
        ];
        let controller_only = [
            ("--name", self.name.is_some()),
            ("--count", self.count.is_some()),
            ("--slots", self.slots.is_some()),
            ("--no-fallback", self.no_fallback),
        ];
        let other = match via {
            Via::Switch => &controller_only[..],
            Via::Controller => &switch_only[..],
        };
        other
            .iter()
            .filter(|(_, given)| *given)
            .map(|(flag, _)| *flag)
            .collect()
    }

    /// Refuses the flags `via` does not take, saying what it takes.
    fn check(&self, via: Via) -> Result<()> {
        let wrong = self.misplaced(via);
        if wrong.is_empty() {
            return Ok(());
        }
        let flags = wrong.join(", ");
        Err(usage(&match via {
            Via::Switch => format!(
                "{flags}: for jobs created through --controller ADDR; straight to a switch a job \
                 takes --id, --workers, --pool-base and --pool-size"
            ),
            Via::Controller => format!(
                "{flags}: for jobs installed on one switch directly (without --controller); ids, \
                 pools and groups are the controller's to choose, and it places tree nodes \
                 itself: give --name, --count and --slots"
            ),
        }))
    }

    /// The job to install on a switch.
    pub fn spec(self) -> Result<JobSpec> {
        self.check(Via::Switch)?;
        let need = |v: Option<u32>, flag: &str| {
            v.ok_or_else(|| usage(&format!("{flag} is needed (or use --controller ADDR)")))
        };
        let id = self
            .id
            .ok_or_else(|| usage("--id is needed (or use --controller ADDR)"))?;
        if self.workers.is_empty() {
            return Err(usage(
                "--workers ENDPOINTS is needed (or use --controller ADDR)",
            ));
        }
        let aux = self.aux_path;
        Ok(JobSpec {
            child_switches: self.child_switch.iter().fold(0, |m, &c| m | 1 << c),
            detours: self.detour,
            upstream: self.upstream.map(|u| Upstream { aux, ..u }),
            id,
            workers: self.workers,
            pool_base: need(self.pool_base, "--pool-base")?,
            pool_size: need(self.pool_size, "--pool-size")?,
            elements: self.elements,
            generation: self.generation,
            queues: self.class_queue,
            group: self.group,
        })
    }

    /// The job to ask a controller for.
    pub fn decl(self) -> Result<JobDecl> {
        self.check(Via::Controller)?;
        let name = self.name.ok_or_else(|| usage("--name is needed"))?;
        let count = match (self.count, self.workers.len()) {
            (Some(n), _) => n,
            (None, 0) => return Err(usage("--count N (workers in the job) is needed")),
            (None, n) => u16::try_from(n).map_err(|_| usage("too many --workers"))?,
        };
        Ok(JobDecl {
            name,
            workers: count,
            slots: self.slots.ok_or_else(|| usage("--slots is needed"))?,
            elements: self.elements,
            fallback: !self.no_fallback,
            endpoints: (!self.workers.is_empty()).then_some(self.workers),
            queues: self.class_queue,
        })
    }
}

/// A job id from the command line (names are the controller's).
pub fn job_id(s: &str) -> Result<u16> {
    s.parse().map_err(|_| {
        usage(&format!(
            "job {s:?}: a switch job is a number (0-65535); named jobs are the controller's \
             (--controller ADDR)"
        ))
    })
}

/// Multicast group verbs.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Make a group by hand: a member's group datagrams are copied to every
    /// other member. Directly: --id. Through --controller: --name (the id is
    /// allocated unless --id is given).
    Create {
        /// Group id (1-65535).
        #[arg(long)]
        id: Option<u16>,
        /// Group name (with --controller).
        #[arg(long)]
        name: Option<String>,
        /// Member endpoints, comma-separated (member id = position).
        #[arg(long, value_delimiter = ',', required = true)]
        members: Vec<SocketAddr>,
    },
    /// List every group, the jobs' and those made by hand.
    #[command(alias = "ls")]
    List,
    /// Remove a group made by hand (a job's group goes with its job).
    #[command(alias = "rm")]
    Delete {
        /// Group id (with --controller: its name).
        group: String,
    },
}

/// The group to make on a switch.
pub fn group_spec(
    id: Option<u16>,
    name: Option<String>,
    members: Vec<SocketAddr>,
) -> Result<GroupSpec> {
    if name.is_some() {
        return Err(usage("--name is for groups made through --controller ADDR"));
    }
    let id = id.ok_or_else(|| usage("--id is needed (or use --controller ADDR)"))?;
    Ok(GroupSpec { id, members })
}

/// The group to ask a controller for.
pub fn group_decl(
    id: Option<u16>,
    name: Option<String>,
    members: Vec<SocketAddr>,
) -> Result<GroupDecl> {
    let name = name.ok_or_else(|| usage("--name is needed"))?;
    Ok(GroupDecl { name, id, members })
}

/// A group id from the command line (names are the controller's).
pub fn group_id(s: &str) -> Result<u16> {
    s.parse().map_err(|_| {
        usage(&format!(
            "group {s:?}: a switch group is a number (1-65535); named groups are the \
             controller's (--controller ADDR)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        job: JobCommand,
    }

    fn create(args: &str) -> Create {
        let argv = ["t", "create"].into_iter().chain(args.split_whitespace());
        match Cli::try_parse_from(argv).unwrap().job {
            JobCommand::Create(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_switch_job_takes_an_id_and_a_pool() {
        let spec = create("--id 3 --workers 10.0.0.1:1,10.0.0.2:1 --pool-base 8 --pool-size 4")
            .spec()
            .unwrap();
        assert_eq!(
            (spec.id, spec.pool_base, spec.pool_size, spec.workers.len()),
            (3, 8, 4, 2)
        );
        let err = create("--id 3 --workers 10.0.0.1:1 --pool-base 8")
            .spec()
            .unwrap_err();
        assert!(err.to_string().contains("--pool-size is needed"), "{err}");
    }

    #[test]
    fn a_controller_job_takes_a_name_and_a_size() {
        let decl = create("--name a --workers 10.0.0.1:1,10.0.0.2:1 --slots 16 --no-fallback")
            .decl()
            .unwrap();
        assert_eq!(
            (decl.name.as_str(), decl.workers, decl.slots, decl.fallback),
            ("a", 2, 16, false)
        );
        let err = create("--name a --slots 16").decl().unwrap_err();
        assert!(
            err.to_string()
                .contains("--count N (workers in the job) is needed"),
            "{err}"
        );
    }

    #[test]
    fn a_flag_of_the_other_way_is_named_in_the_refusal() {
        let cases: [(&str, Via, &str); 2] = [
            (
                "--name a --id 3 --workers 10.0.0.1:1 --pool-base 0 --pool-size 4",
                Via::Switch,
                "--name: for jobs created through --controller ADDR",
            ),
            (
                "--name a --count 2 --slots 4 --pool-base 0 --detour 1=10.0.0.2:47000",
                Via::Controller,
                "--pool-base, --detour: for jobs installed on one switch directly",
            ),
        ];
        for (args, via, said) in cases {
            let c = create(args);
            let err = match via {
                Via::Switch => c.spec().map(drop),
                Via::Controller => c.decl().map(drop),
            }
            .unwrap_err();
            assert!(err.to_string().contains(said), "{args}: {err}");
        }
    }
}
