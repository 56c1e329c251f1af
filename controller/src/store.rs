//! The controller's desired state on disk: an embedded database (redb:
//! ACID, one file, a commit is durable once it returns), so jobs, their
//! pools and the priority map survive a crash or restart of the controller
//! and are re-installed from here.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// job name -> the job's record (JSON).
const JOBS: TableDefinition<&str, &str> = TableDefinition::new("jobs");
/// key -> JSON value (the priority map, the generation counter).
const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
/// The audit: one JSON entry per number, the newest `keep` of them.
const EVENTS: TableDefinition<u64, &str> = TableDefinition::new("events");

/// A store failure: the file is unusable (the environment's fault: disk,
/// permissions, or another controller holding the file).
#[derive(Debug, thiserror::Error)]
#[error("controller state {path}: {message}")]
pub struct StoreError {
    path: String,
    message: String,
}

/// The open database (closed when its controller stops, so that another
/// controller, in this process or another, can open the file).
pub struct Store {
    db: Option<Database>,
    path: String,
}

/// What went wrong opening the file, and what to do, decided by redb's
/// error rather than guessed: a lock held, the file unreadable, or a file
/// that is not a controller's database.
fn open_advice(e: redb::DatabaseError) -> String {
    match e {
        redb::DatabaseError::DatabaseAlreadyOpen => {
            format!(
                "{e}: another controller is using it (stop it, or give this one its own --state)"
            )
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() != std::io::ErrorKind::InvalidData =>
        {
            format!("cannot open: {io}")
        }
        other => open_advice_damaged(&other.to_string()),
    }
}

fn open_advice_damaged(what: &str) -> String {
    format!(
        "not a controller database, or damaged ({what}): restore it, or move it aside to start \
         with no jobs (the switch's jobs are then removed)"
    )
}

/// `Database::create`, or None where redb panics instead of returning an
/// error (it asserts on some truncated files). The panic's message is held
/// back on this thread meanwhile: the caller reports the damage in its own
/// words.
fn create_quietly(path: &Path) -> Option<Result<Database, redb::DatabaseError>> {
    QUIET.with(|q| q.set(true));
    quiet_hook();
    let result = std::panic::catch_unwind(|| Database::create(path));
    QUIET.with(|q| q.set(false));
    result.ok()
}

thread_local! {
    /// This thread's panics print nothing (see [`create_quietly`]).
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once per process, a panic hook that passes every panic to the
/// hook it found, except on a thread that is [`QUIET`]. Swapping the hook
/// around each call instead would silence every thread's panics
/// meanwhile, and two calls at once could leave the silent hook in place
/// for good. (A thread whose locals are gone, panicking as it exits, is
/// not quiet.)
fn quiet_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let found = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.try_with(std::cell::Cell::get).unwrap_or(false) {
                found(info);
            }
        }));
    });
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        let refuse = |message: String| StoreError {
            path: name.clone(),
            message,
        };
        // redb would take an empty file for a new database, and the
        // controller would then remove every job from the switch: an empty
        // file is a damaged one far more often than a wish to start over.
        if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            return Err(refuse(
                "the file is empty, not a controller database: remove it to start with no \
                 jobs (the switch's jobs are then removed)"
                    .into(),
            ));
        }
        let db = create_quietly(path)
            .ok_or_else(|| refuse(open_advice_damaged("redb stopped on an inconsistent file")))?
            .map_err(|e| refuse(open_advice(e)))?;
        let store = Store {
            db: Some(db),
            path: name,
        };
        // Create the tables so that reads never meet a missing one.
        let txn = store.db()?.begin_write().map_err(|e| store.err(e))?;
        txn.open_table(JOBS).map_err(|e| store.err(e))?;
        txn.open_table(META).map_err(|e| store.err(e))?;
        txn.open_table(EVENTS).map_err(|e| store.err(e))?;
        txn.commit().map_err(|e| store.err(e))?;
        Ok(store)
    }

    /// Closes the file; later calls fail.
    pub fn close(&mut self) {
        self.db = None;
    }

    fn db(&self) -> Result<&Database, StoreError> {
        self.db
            .as_ref()
            .ok_or_else(|| self.err("closed: the controller is stopping"))
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Every stored job's record.
    pub fn jobs<J: DeserializeOwned>(&self) -> Result<Vec<J>, StoreError> {
        let txn = self.db()?.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(JOBS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in table.iter().map_err(|e| self.err(e))? {
            let (name, value) = row.map_err(|e| self.err(e))?;
            let job = serde_json::from_str(value.value())
                .map_err(|e| self.err(format!("job {}: {e}", name.value())))?;
            out.push(job);
        }
        Ok(out)
    }

    /// Writes (or replaces) the record of the job `name`.
    pub fn put_job<J: Serialize>(&self, name: &str, job: &J) -> Result<(), StoreError> {
        let value = serde_json::to_string(job).map_err(|e| self.err(e))?;
        self.write(JOBS, name, Some(&value))
    }

    /// Removes a job.
    pub fn delete_job(&self, name: &str) -> Result<(), StoreError> {
        self.write(JOBS, name, None)
    }

    /// A metadata value, if set.
    pub fn meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreError> {
        let txn = self.db()?.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(META).map_err(|e| self.err(e))?;
        let Some(v) = table.get(key).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        serde_json::from_str(v.value())
            .map(Some)
            .map_err(|e| self.err(format!("{key}: {e}")))
    }

    /// Sets a metadata value.
    pub fn set_meta<T: Serialize>(&self, key: &str, value: &T) -> Result<(), StoreError> {
        let value = serde_json::to_string(value).map_err(|e| self.err(e))?;
        self.write(META, key, Some(&value))
    }

    /// Appends audit entry `seq` and forgets the one `keep` before it, in
    /// one transaction, so the table never holds more than `keep`.
    pub fn append_event<T: Serialize>(
        &self,
        seq: u64,
        event: &T,
        keep: u64,
    ) -> Result<(), StoreError> {
        let value = serde_json::to_string(event).map_err(|e| self.err(e))?;
        let txn = self.db()?.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = txn.open_table(EVENTS).map_err(|e| self.err(e))?;
            t.insert(seq, value.as_str()).map_err(|e| self.err(e))?;
            if let Some(old) = seq.checked_sub(keep) {
                t.remove(old).map_err(|e| self.err(e))?;
            }
        }
        txn.commit().map_err(|e| self.err(e))
    }

    /// The number of the newest audit entry, 0 when there is none.
    pub fn last_event(&self) -> Result<u64, StoreError> {
        let txn = self.db()?.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(EVENTS).map_err(|e| self.err(e))?;
        let last = table.last().map_err(|e| self.err(e))?;
        Ok(last.map_or(0, |(k, _)| k.value()))
    }

    /// The newest audit entries that `keep` takes, at most `last` of them,
    /// oldest first.
    pub fn events<T: DeserializeOwned>(
        &self,
        last: usize,
        keep: impl Fn(&T) -> bool,
    ) -> Result<Vec<T>, StoreError> {
        let txn = self.db()?.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(EVENTS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in table.iter().map_err(|e| self.err(e))?.rev() {
            if out.len() >= last {
                break;
            }
            let (seq, value) = row.map_err(|e| self.err(e))?;
            let event: T = serde_json::from_str(value.value())
                .map_err(|e| self.err(format!("audit entry {}: {e}", seq.value())))?;
            if keep(&event) {
                out.push(event);
            }
        }
        out.reverse();
        Ok(out)
    }

    fn write(
        &self,
        table: TableDefinition<&str, &str>,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), StoreError> {
        let txn = self.db()?.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = txn.open_table(table).map_err(|e| self.err(e))?;
            match value {
                Some(v) => {
                    t.insert(key, v).map_err(|e| self.err(e))?;
                }
                None => {
                    t.remove(key).map_err(|e| self.err(e))?;
                }
            }
        }
        txn.commit().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("inagg-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn open_error(path: &Path) -> String {
        match Store::open(path) {
            Ok(_) => panic!("{} opened", path.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn each_way_a_state_file_cannot_be_opened_gets_its_own_advice() {
        let held = scratch("held");
        let first = Store::open(&held).unwrap();
        let err = open_error(&held);
        assert!(err.contains("another controller is using it"), "{err}");
        drop(first);
        Store::open(&held).unwrap();

        let garbage = scratch("garbage");
        std::fs::write(
            &garbage,
            b"not a database, but long enough to be read as one",
        )
        .unwrap();
        let err = open_error(&garbage);
        assert!(
            err.contains("not a controller database, or damaged"),
            "{err}"
        );
        assert!(!err.contains("another controller"), "{err}");

        let missing = std::env::temp_dir()
            .join("inagg-no-such-dir")
            .join("state.redb");
        let err = open_error(&missing);
        assert!(
            err.contains("cannot open: No such file or directory"),
            "{err}"
        );
        // A database cut short (redb asserts on this one) and an empty
        // file: refused with advice, not a panic or a fresh start.
        let cut = scratch("cut");
        drop(Store::open(&cut).unwrap());
        let file = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
        file.set_len(4096).unwrap();
        let err = open_error(&cut);
        assert!(
            err.contains("not a controller database, or damaged"),
            "{err}"
        );
        let empty = scratch("empty");
        std::fs::write(&empty, b"").unwrap();
        let err = open_error(&empty);
        assert!(err.contains("the file is empty"), "{err}");
        assert_eq!(
            std::fs::metadata(&empty).unwrap().len(),
            0,
            "left as it was"
        );
        for p in [held, garbage, cut, empty] {
            let _ = std::fs::remove_file(p);
        }
    }
}
