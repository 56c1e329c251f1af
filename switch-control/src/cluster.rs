//! Declarative cluster files: the jobs a switch should hold, in TOML.
//!
//! ```toml
//! [switch]
//! target = "emu"                 # or "bmv2", "tofino"; `ctl --target` overrides it
//! control = "127.0.0.1:47001"    # optional; `ctl --addr` overrides it
//!
//! [[job]]
//! id = 1
//! workers = ["127.0.0.1:5000", "127.0.0.1:5001"]
//! pool_base = 0
//! pool_size = 256
//! elements = 64                  # optional, default 64
//! generation = 0                 # optional, default 0
//! ```
//!
//! `apply` computes a plan against the switch (create, replace, keep, and
//! with `prune` delete), checks the whole resulting state (ids, overlaps,
//! memory) before touching anything, then carries it out.

use std::net::SocketAddr;

use inagg_switch_api::queues::ClassQueue;
use inagg_switch_api::{validate_job, JobSpec};
use serde::{Deserialize, Serialize};

use crate::target::{ControlError, Result, Target};

/// A parsed cluster file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Which switch.
    #[serde(default)]
    pub switch: SwitchSection,
    /// The jobs it should hold.
    #[serde(default, rename = "job")]
    pub jobs: Vec<JobSection>,
}

/// The `[switch]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSection {
    /// Target kind.
    #[serde(default = "default_target")]
    pub target: String,
    /// Control endpoint.
    pub control: Option<SocketAddr>,
}

impl Default for SwitchSection {
    fn default() -> Self {
        SwitchSection {
            target: default_target(),
            control: None,
        }
    }
}

fn default_target() -> String {
    "emu".into()
}

/// One `[[job]]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    /// Job id.
    pub id: u16,
    /// Worker endpoints, worker id = position.
    pub workers: Vec<SocketAddr>,
    /// First slot.
    pub pool_base: u32,
    /// Slots.
    pub pool_size: u32,
    /// K.
    #[serde(default = "default_elements")]
    pub elements: u16,
    /// Membership generation.
    #[serde(default)]
    pub generation: u16,
    /// This job's priority class -> egress queue map
    /// (`queues = [{ class = 5, queue = 7 }]`).
    #[serde(default)]
    pub queues: Vec<ClassQueue>,
    /// The multicast group of the job's results [default: the target's pick].
    #[serde(default)]
    pub group: Option<u16>,
}

fn default_elements() -> u16 {
    64
}

impl From<&JobSection> for JobSpec {
    fn from(j: &JobSection) -> JobSpec {
        JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            upstream: None,
            id: j.id,
            workers: j.workers.clone(),
            pool_base: j.pool_base,
            pool_size: j.pool_size,
            elements: j.elements,
            generation: j.generation,
            queues: j.queues.clone(),
            group: j.group,
        }
    }
}

impl ClusterFile {
    /// Parses a file's text; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<ClusterFile> {
        let file: ClusterFile = toml::from_str(text).map_err(|e| ControlError::Config {
            path: path.into(),
            message: e.to_string(),
        })?;
        crate::registry::find(&file.switch.target).map_err(|e| ControlError::Config {
            path: path.into(),
            message: e.to_string(),
        })?;
        Ok(file)
    }

    /// Reads and parses a file.
    pub fn load(path: &str) -> Result<ClusterFile> {
        Self::parse(path, &crate::files::read_config(path)?)
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Step {
    /// Install a new job.
    Create {
        /// The job.
        spec: JobSpec,
    },
    /// The job exists with other settings: delete, then install.
    Replace {
        /// As installed.
        old: JobSpec,
        /// As wanted.
        new: JobSpec,
    },
    /// Already as wanted.
    Keep {
        /// Its id.
        id: u16,
    },
    /// Installed but not in the file (only with prune).
    Delete {
        /// The job.
        spec: JobSpec,
    },
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pool = |s: &JobSpec| {
            format!(
                "pool [{}, {}) k={} workers={}",
                s.pool_base,
                s.pool_end(),
                s.elements,
                s.workers.len()
            )
        };
        match self {
            Step::Create { spec } => write!(f, "+ job {}: {}", spec.id, pool(spec)),
            Step::Replace { old, new } => {
                write!(f, "~ job {}: {} -> {}", new.id, pool(old), pool(new))
            }
            Step::Keep { id } => write!(f, "= job {id}: unchanged"),
            Step::Delete { spec } => write!(f, "- job {}: {}", spec.id, pool(spec)),
        }
    }
}

/// Works out the plan and checks the state it leads to.
pub fn plan(
    file: &ClusterFile,
    path: &str,
    target: &mut dyn Target,
    prune: bool,
) -> Result<Vec<Step>> {
    let info = target.info()?;
    let config = info.config();
    let installed: Vec<JobSpec> = target.jobs()?.into_iter().map(|j| j.spec).collect();
    let wanted: Vec<JobSpec> = file.jobs.iter().map(JobSpec::from).collect();
    let mut steps = Vec::new();
    let mut end_state: Vec<JobSpec> = Vec::new();
    for old in &installed {
        if !wanted.iter().any(|w| w.id == old.id) {
            if prune {
                steps.push(Step::Delete { spec: old.clone() });
            } else {
                end_state.push(old.clone());
            }
        }
    }
    for new in &wanted {
        let config_err = |e: inagg_switch_api::JobError| ControlError::Config {
            path: path.into(),
            message: e.to_string(),
        };
        validate_job(new, &end_state, config).map_err(config_err)?;
        end_state.push(new.clone());
        steps.push(match installed.iter().find(|o| o.id == new.id) {
            None => Step::Create { spec: new.clone() },
            Some(old) if old == new => Step::Keep { id: new.id },
            Some(old) => Step::Replace {
                old: old.clone(),
                new: new.clone(),
            },
        });
    }
    Ok(steps)
}

/// Carries out a plan: removals first, so that moved pools do not collide.
pub fn execute(steps: &[Step], target: &mut dyn Target) -> Result<()> {
    for step in steps {
        match step {
            Step::Delete { spec } => target.delete_job(spec.id)?,
            Step::Replace { old, .. } => target.delete_job(old.id)?,
            _ => {}
        }
    }
    for step in steps {
        match step {
            Step::Create { spec } | Step::Replace { new: spec, .. } => target.create_job(spec)?,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[switch]
target = "emu"

[[job]]
id = 1
workers = ["127.0.0.1:5000", "127.0.0.1:5001"]
pool_base = 0
pool_size = 128

[[job]]
id = 2
workers = ["127.0.0.1:6000"]
pool_base = 128
pool_size = 64
elements = 256
"#;

    #[test]
    fn parses_with_defaults() {
        let f = ClusterFile::parse("c.toml", FILE).unwrap();
        assert_eq!(f.jobs.len(), 2);
        assert_eq!((f.jobs[0].elements, f.jobs[1].elements), (64, 256));
    }

    #[test]
    fn malformed_files_say_where_and_what() {
        let err = ClusterFile::parse(
            "c.toml",
            "[[job]]\nid = 1\nworkers = []\npool_base = 0\npool_sise = 3\n",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("c.toml: ") && msg.contains("pool_sise"),
            "{msg}"
        );
        let err = ClusterFile::parse("c.toml", "[switch]\ntarget = \"tofino9\"\n").unwrap_err();
        assert!(
            err.to_string().contains("unknown target \"tofino9\""),
            "{err}"
        );
        let err = ClusterFile::parse("c.toml", "[[job]]\nid = 70000\n").unwrap_err();
        assert!(err.to_string().starts_with("c.toml: "), "{err}");
    }
}
