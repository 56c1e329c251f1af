//! The controller's desired state on disk: an embedded database (redb:
//! ACID, one file, a commit is durable once it returns), so jobs, their
//! pools and the priority map survive a crash or restart of the controller
//! and are re-installed from here.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::state::JobRecord;

/// name -> JobRecord (JSON).
const JOBS: TableDefinition<&str, &str> = TableDefinition::new("jobs");
/// key -> JSON value (the priority map, the generation counter).
const META: TableDefinition<&str, &str> = TableDefinition::new("meta");

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

impl Store {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        let db = Database::create(path).map_err(|e| StoreError {
            path: name.clone(),
            message: format!("{e} (is another controller using it?)"),
        })?;
        let store = Store {
            db: Some(db),
            path: name,
        };
        // Create the tables so that reads never meet a missing one.
        let txn = store.db()?.begin_write().map_err(|e| store.err(e))?;
        txn.open_table(JOBS).map_err(|e| store.err(e))?;
        txn.open_table(META).map_err(|e| store.err(e))?;
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

    /// Every stored job.
    pub fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
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

    /// Writes (or replaces) a job.
    pub fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        let value = serde_json::to_string(job).map_err(|e| self.err(e))?;
        self.write(JOBS, &job.decl.name, Some(&value))
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
