//! Declarative files for the controller: the jobs (by name), multicast
//! groups made by hand and the switch-wide priority map it should hold.
//!
//! ```toml
//! priority = [{ class = 5, queue = 7 }]   # optional
//!
//! [[job]]
//! name = "resnet"
//! workers = 4
//! slots = 256
//! elements = 64                  # optional, default 64
//! fallback = true                # optional: run on a host emulator when full
//! queues = [{ class = 5, queue = 7 }]    # optional, this job's own map
//! # endpoints = ["10.0.0.1:5000", ...]   # optional: workers that do not register
//!
//! [[group]]
//! name = "peers"
//! members = ["10.0.0.1:6000", "10.0.0.2:6000"]
//! # id = 7                      # optional: the controller allocates one
//! ```
//!
//! `inagg ctl --controller ADDR apply -f FILE` works out the changes
//! (create, re-create, keep, and with `--prune` delete), shows them as a
//! diff, checks every declaration as the controller will before changing
//! anything, then carries them out. The controller places pools and
//! allocates ids as it does for `job create`.

use std::collections::BTreeSet;

use inagg_switch_api::queues::ClassQueue;
use serde::{Deserialize, Serialize};

use crate::book::{check_decl, check_group_decl};
use inagg_controller_api::{Client, ClientError};
use inagg_controller_api::{GroupDecl, GroupStatus, JobDecl, JobStatus};
use inagg_switch_control::target::{ControlError, Result};

/// A parsed controller file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerFile {
    /// Switch-wide class -> queue entries to set (others are left alone).
    #[serde(default)]
    pub priority: Vec<ClassQueue>,
    /// The jobs the controller should hold.
    #[serde(default, rename = "job")]
    pub jobs: Vec<JobDecl>,
    /// The groups made by hand it should hold.
    #[serde(default, rename = "group")]
    pub groups: Vec<GroupDecl>,
}

impl ControllerFile {
    /// Parses and checks a file's text; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<ControllerFile> {
        let config = |message: String| ControlError::Config {
            path: path.into(),
            message,
        };
        let file: ControllerFile = toml::from_str(text).map_err(|e| config(e.to_string()))?;
        inagg_switch_api::check_queue_map(&file.priority)
            .map_err(|e| config(format!("priority: {e}")))?;
        for d in &file.jobs {
            check_decl(d).map_err(|e| config(e.to_string()))?;
        }
        for g in &file.groups {
            check_group_decl(g).map_err(|e| config(e.to_string()))?;
        }
        let twice = |names: Vec<&str>, what: &str| {
            let mut seen = BTreeSet::new();
            match names.into_iter().find(|n| !seen.insert(*n)) {
                Some(n) => Err(config(format!("{what} {n:?} is declared twice"))),
                None => Ok(()),
            }
        };
        twice(file.jobs.iter().map(|j| j.name.as_str()).collect(), "job")?;
        twice(
            file.groups.iter().map(|g| g.name.as_str()).collect(),
            "group",
        )?;
        let mut ids = BTreeSet::new();
        if let Some(id) = file
            .groups
            .iter()
            .filter_map(|g| g.id)
            .find(|i| !ids.insert(*i))
        {
            return Err(config(format!("group id {id} is declared twice")));
        }
        Ok(file)
    }

    /// Reads, parses and checks a file.
    pub fn load(path: &str) -> Result<ControllerFile> {
        Self::parse(path, &inagg_switch_control::files::read_config(path)?)
    }
}

/// One change of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Change {
    /// Admit a new job.
    CreateJob {
        /// The job.
        decl: JobDecl,
    },
    /// The job exists with other settings: delete it, admit it again (its
    /// pool may move; its workers register again).
    ReplaceJob {
        /// As the controller holds it.
        old: JobDecl,
        /// As the file wants it.
        new: JobDecl,
    },
    /// Already as wanted.
    KeepJob {
        /// Its name.
        name: String,
    },
    /// Held but not in the file (with prune).
    DeleteJob {
        /// Its name.
        name: String,
    },
    /// Make a new group.
    CreateGroup {
        /// The group.
        decl: GroupDecl,
    },
    /// The group exists with other members or id: delete, make again.
    ReplaceGroup {
        /// As the controller holds it.
        old: GroupDecl,
        /// As the file wants it.
        new: GroupDecl,
    },
    /// Already as wanted.
    KeepGroup {
        /// Its name.
        name: String,
    },
    /// Held but not in the file (with prune).
    DeleteGroup {
        /// Its name.
        name: String,
    },
    /// A switch-wide priority entry that changes.
    SetPriority {
        /// The class.
        class: u8,
        /// Its queue now.
        was: u8,
        /// Its queue after.
        queue: u8,
    },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::CreateJob { decl } => write!(
                f,
                "+ job {}: {} workers, {} slots, k={}",
                decl.name, decl.workers, decl.slots, decl.elements
            ),
            Change::ReplaceJob { old, new } => write!(
                f,
                "~ job {}: {} (re-created: its workers register again)",
                new.name,
                field_diff(old, new)
            ),
            Change::KeepJob { name } => write!(f, "= job {name}: unchanged"),
            Change::DeleteJob { name } => write!(f, "- job {name}"),
            Change::CreateGroup { decl } => {
                write!(f, "+ group {}: {} members", decl.name, decl.members.len())?;
                match decl.id {
                    Some(id) => write!(f, ", id {id}"),
                    None => Ok(()),
                }
            }
            Change::ReplaceGroup { old, new } => {
                write!(f, "~ group {}: {}", new.name, field_diff(old, new))
            }
            Change::KeepGroup { name } => write!(f, "= group {name}: unchanged"),
            Change::DeleteGroup { name } => write!(f, "- group {name}"),
            Change::SetPriority { class, was, queue } => {
                write!(f, "~ priority class {class}: queue {was} -> {queue}")
            }
        }
    }
}

/// "field old -> new" for every top-level field that differs.
fn field_diff<T: Serialize>(old: &T, new: &T) -> String {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return "changed".into();
    };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let show = |v: Option<&serde_json::Value>| v.map_or("-".to_string(), ToString::to_string);
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k} {} -> {}", show(a.get(k)), show(b.get(k))))
        .collect();
    diffs.join(", ")
}

/// A hand-made group as the controller reports it, in the file's terms:
/// the id counts only when the file gives one.
fn held_decl(g: &GroupStatus, wanted: &GroupDecl) -> GroupDecl {
    GroupDecl {
        name: g.name.clone(),
        id: wanted.id.map(|_| g.id),
        members: g.members.clone(),
    }
}

/// Works out the changes that make the controller hold what `file` says.
pub fn plan(file: &ControllerFile, path: &str, c: &mut Client, prune: bool) -> Result<Vec<Change>> {
    let jobs: Vec<JobStatus> = c.jobs().map_err(controller_error)?;
    let all_groups = c.groups().map_err(controller_error)?;
    let groups: Vec<&GroupStatus> = all_groups.iter().filter(|g| g.owner == "hand").collect();
    let mut changes = Vec::new();
    for new in &file.jobs {
        changes.push(match jobs.iter().find(|j| j.decl.name == new.name) {
            None => Change::CreateJob { decl: new.clone() },
            Some(j) if j.decl == *new => Change::KeepJob {
                name: new.name.clone(),
            },
            Some(j) => Change::ReplaceJob {
                old: j.decl.clone(),
                new: new.clone(),
            },
        });
    }
    for new in &file.groups {
        changes.push(match groups.iter().find(|g| g.name == new.name) {
            None => Change::CreateGroup { decl: new.clone() },
            Some(g) if held_decl(g, new) == *new => Change::KeepGroup {
                name: new.name.clone(),
            },
            Some(g) => Change::ReplaceGroup {
                old: held_decl(g, new),
                new: new.clone(),
            },
        });
    }
    if prune {
        let deleted_jobs = jobs
            .iter()
            .filter(|j| !file.jobs.iter().any(|d| d.name == j.decl.name))
            .map(|j| Change::DeleteJob {
                name: j.decl.name.clone(),
            });
        let deleted_groups = groups
            .iter()
            .filter(|g| !file.groups.iter().any(|d| d.name == g.name))
            .map(|g| Change::DeleteGroup {
                name: g.name.clone(),
            });
        changes.extend(deleted_jobs.chain(deleted_groups).collect::<Vec<_>>());
    }
    let held = c.priority().map_err(controller_error)?;
    for cq in &file.priority {
        let was = held
            .iter()
            .find(|h| h.class == cq.class)
            .map_or(0, |h| h.queue);
        if was != cq.queue {
            changes.push(Change::SetPriority {
                class: cq.class,
                was,
                queue: cq.queue,
            });
        }
    }
    check_group_ids(file, path, &changes, &all_groups)?;
    Ok(changes)
}

/// Refuses a file whose explicit group ids are held by a group that stays.
fn check_group_ids(
    file: &ControllerFile,
    path: &str,
    changes: &[Change],
    held: &[GroupStatus],
) -> Result<()> {
    let goes = |name: &str| {
        changes.iter().any(|c| {
            matches!(c, Change::DeleteJob { name: n } | Change::DeleteGroup { name: n } if n == name)
                || matches!(c, Change::ReplaceGroup { new, .. } if new.name == name)
        })
    };
    for g in &file.groups {
        let Some(id) = g.id else { continue };
        if let Some(h) = held
            .iter()
            .find(|h| h.id == id && h.name != g.name && !goes(&h.name))
        {
            return Err(ControlError::Config {
                path: path.into(),
                message: format!(
                    "group {:?}: id {id} is held by {} {:?}; pick another id or omit it",
                    g.name, h.owner, h.name
                ),
            });
        }
    }
    Ok(())
}

/// Carries out a plan: deletions first (so freed slots and ids can be
/// reused), then creations, then the priority map. A failure names the
/// change and says that the ones before it were made.
pub fn execute(changes: &[Change], c: &mut Client) -> Result<()> {
    let step = |i: usize, change: &Change, e: ControlError| ControlError::Config {
        path: "apply".into(),
        message: format!(
            "change {} of {} ({change}) failed: {e}; the changes listed before it were made",
            i + 1,
            changes.len()
        ),
    };
    for (i, change) in changes.iter().enumerate() {
        let r = match change {
            Change::DeleteJob { name }
            | Change::ReplaceJob {
                new: JobDecl { name, .. },
                ..
            } => c.delete_job(name),
            Change::DeleteGroup { name }
            | Change::ReplaceGroup {
                new: GroupDecl { name, .. },
                ..
            } => c.delete_group(name),
            _ => Ok(()),
        };
        r.map_err(|e| step(i, change, controller_error(e)))?;
    }
    for (i, change) in changes.iter().enumerate() {
        let r = match change {
            Change::CreateJob { decl } | Change::ReplaceJob { new: decl, .. } => {
                c.create_job(decl.clone()).map(drop)
            }
            Change::CreateGroup { decl } | Change::ReplaceGroup { new: decl, .. } => {
                c.create_group(decl.clone()).map(drop)
            }
            Change::SetPriority { class, queue, .. } => c.set_priority(*class, *queue),
            _ => Ok(()),
        };
        r.map_err(|e| step(i, change, controller_error(e)))?;
    }
    Ok(())
}

/// A controller's answer as a [`ControlError`], its message kept.
fn controller_error(e: ClientError) -> ControlError {
    ControlError::Controller(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
priority = [{ class = 5, queue = 7 }]

[[job]]
name = "resnet"
workers = 4
slots = 256

[[group]]
name = "peers"
members = ["127.0.0.1:6000", "127.0.0.1:6001"]
"#;

    #[test]
    fn parses_with_defaults() {
        let f = ControllerFile::parse("c.toml", FILE).unwrap();
        assert_eq!(f.jobs[0].elements, 64);
        assert!(f.jobs[0].fallback);
        assert_eq!(f.groups[0].id, None);
        assert_eq!(f.priority, vec![ClassQueue { class: 5, queue: 7 }]);
    }

    #[test]
    fn bad_files_say_where_and_what() {
        let cases = [
            ("[[job]]\nname = \"a\"\nworkers = 2\nslot = 3\n", "slot"),
            (
                "[[job]]\nname = \"a\"\nworkers = 0\nslots = 3\n",
                "0 workers",
            ),
            ("[[group]]\nname = \"g\"\nmembers = []\n", "has 0 members"),
            (
                "[[group]]\nname = \"g\"\nmembers = [\"127.0.0.1:1\"]\n\
                 [[group]]\nname = \"g\"\nmembers = [\"127.0.0.1:2\"]\n",
                "group \"g\" is declared twice",
            ),
            (
                "priority = [{ class = 1, queue = 9 }]\n",
                "queue 9 does not exist",
            ),
        ];
        for (text, want) in cases {
            let err = ControllerFile::parse("c.toml", text)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("c.toml: ") && err.contains(want), "{err}");
        }
    }

    #[test]
    fn a_replaced_job_shows_what_changed() {
        let f = ControllerFile::parse("c.toml", FILE).unwrap();
        let old = f.jobs[0].clone();
        let new = JobDecl {
            slots: 512,
            ..old.clone()
        };
        let change = Change::ReplaceJob { old, new };
        assert_eq!(
            change.to_string(),
            "~ job resnet: slots 256 -> 512 (re-created: its workers register again)"
        );
    }
}
