//! Tenants: who may change what on a controller shared by many.
//!
//! The operator (the controller's `--token`) declares tenants, each with a
//! quota of aggregator slots and priority-map entries; a tenant holds a
//! credential, `NAME.SECRET`, that sees and changes only its own jobs and
//! registers workers only to them. The secret is 32 random bytes, shown
//! once when it is issued; the controller keeps a salted SHA-256 of it,
//! never the secret (a random secret of that size needs no slow hash: it
//! cannot be guessed from a dictionary). Pure: the daemon decides who a
//! request is from with [`TenantRecord::verifies`] and the book checks
//! quotas with [`check_quota`].

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::book::JobRecord;
use inagg_controller_api::{JobDecl, TenantDecl, TenantStatus};

/// A tenant as stored: its declaration and its credential's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// What the operator declared.
    pub decl: TenantDecl,
    /// The salt, hex.
    salt: String,
    /// SHA-256 of the salt and the secret, hex.
    hash: String,
}

impl TenantRecord {
    /// A tenant with a fresh credential, which is returned (and not kept).
    pub fn issue(decl: TenantDecl) -> (TenantRecord, String) {
        let mut record = TenantRecord {
            decl,
            salt: String::new(),
            hash: String::new(),
        };
        let credential = record.rotate();
        (record, credential)
    }

    /// Replaces the credential: the old one stops verifying; the new one is
    /// returned.
    pub fn rotate(&mut self) -> String {
        let mut rng = rand::rng();
        let salt: [u8; 16] = rng.random();
        let secret: [u8; 32] = rng.random();
        let secret = hex(&secret);
        self.salt = hex(&salt);
        self.hash = digest(&self.salt, &secret);
        format!("{}.{secret}", self.decl.name)
    }

    /// Whether `secret` is this tenant's, compared in constant time.
    pub fn verifies(&self, secret: &str) -> bool {
        let got = digest(&self.salt, secret);
        got.len() == self.hash.len()
            && got
                .bytes()
                .zip(self.hash.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// A credential's tenant name and secret: `NAME.SECRET`, split at the last
/// dot (names may hold dots; secrets are hex).
pub fn split_credential(credential: &str) -> Option<(&str, &str)> {
    let (name, secret) = credential.rsplit_once('.')?;
    (!name.is_empty() && secret.len() == 64).then_some((name, secret))
}

fn digest(salt: &str, secret: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(b":");
    h.update(secret.as_bytes());
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a tenant's jobs hold: their names, slots and priority entries.
pub fn usage(jobs: &BTreeMap<String, JobRecord>, tenant: &str) -> (Vec<String>, u64, u64) {
    let mine = jobs
        .values()
        .filter(|j| j.tenant.as_deref() == Some(tenant));
    let (mut names, mut slots, mut queues) = (Vec::new(), 0u64, 0u64);
    for j in mine {
        names.push(j.decl.name.clone());
        slots += u64::from(j.decl.slots);
        queues += j.decl.queues.len() as u64;
    }
    (names, slots, queues)
}

/// The tenant's status.
pub fn status(record: &TenantRecord, jobs: &BTreeMap<String, JobRecord>) -> TenantStatus {
    let (names, slots, queues) = usage(jobs, &record.decl.name);
    TenantStatus {
        decl: record.decl.clone(),
        jobs: names,
        slots_used: u32::try_from(slots).unwrap_or(u32::MAX),
        queues_used: u32::try_from(queues).unwrap_or(u32::MAX),
    }
}

/// Whether `decl` fits in the tenant's quota beside its other jobs; the
/// error says what it would hold and what the quota is.
pub fn check_quota(
    record: &TenantRecord,
    jobs: &BTreeMap<String, JobRecord>,
    decl: &JobDecl,
) -> Result<(), String> {
    let quota = &record.decl;
    let (_, slots, queues) = usage(jobs, &quota.name);
    let slots = slots + u64::from(decl.slots);
    if slots > u64::from(quota.slots) {
        return Err(format!(
            "its jobs would hold {slots} slots, beyond tenant {:?}'s quota of {} (ask the \
             operator for more, or delete a job)",
            quota.name, quota.slots
        ));
    }
    let queues = queues + decl.queues.len() as u64;
    if queues > u64::from(quota.queues) {
        return Err(format!(
            "its jobs would carry {queues} priority-map entries, beyond tenant {:?}'s quota of {}",
            quota.name, quota.queues
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(name: &str) -> TenantDecl {
        TenantDecl {
            name: name.into(),
            slots: 32,
            queues: 1,
        }
    }

    #[test]
    fn a_credential_verifies_until_it_is_rotated_and_is_not_stored() {
        let (mut record, credential) = TenantRecord::issue(decl("team.a"));
        let (name, secret) = split_credential(&credential).unwrap();
        assert_eq!(name, "team.a");
        assert!(record.verifies(secret));
        assert!(!record.verifies(&secret.replace(&secret[..1], "x")));
        let stored = serde_json::to_string(&record).unwrap();
        assert!(
            !stored.contains(secret),
            "the secret is not stored: {stored}"
        );
        let again = record.rotate();
        assert!(!record.verifies(secret), "the old credential stops working");
        assert!(record.verifies(split_credential(&again).unwrap().1));
        assert_eq!(split_credential("no-dot"), None);
        assert_eq!(split_credential("a.short"), None);
    }

    #[test]
    fn quotas_count_slots_and_queue_entries_of_the_tenants_jobs_only() {
        let (record, _) = TenantRecord::issue(decl("a"));
        let jobs = BTreeMap::new();
        let mut d = JobDecl::new("j", 2, 32);
        assert_eq!(check_quota(&record, &jobs, &d), Ok(()));
        d.slots = 33;
        let e = check_quota(&record, &jobs, &d).unwrap_err();
        assert!(
            e.contains("33 slots, beyond tenant \"a\"'s quota of 32"),
            "{e}"
        );
        d.slots = 8;
        d.queues = vec![
            inagg_switch_api::queues::ClassQueue { class: 1, queue: 7 },
            inagg_switch_api::queues::ClassQueue { class: 2, queue: 6 },
        ];
        let e = check_quota(&record, &jobs, &d).unwrap_err();
        assert!(e.contains("2 priority-map entries"), "{e}");
    }
}
