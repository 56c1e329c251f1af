//! BF Runtime table entries by name: built from and read back into the
//! names of p4/README.md, "Control-plane interface", every id resolved
//! through [`BfrtInfo`]. A value that does not fit its field's width is an
//! error, never truncated.

use super::bfrt_info::{Action, BfrtInfo, Field, Table};
use super::proto::bfrt_proto as bfrt;
use crate::target::{ControlError, Result};

/// A table entry being built.
pub(crate) struct Entry<'a> {
    info: &'a BfrtInfo,
    table: &'a Table,
    action: Option<&'a Action>,
    key: Vec<bfrt::KeyField>,
    data: Vec<bfrt::DataField>,
    target: Option<bfrt::TargetDevice>,
}

impl BfrtInfo {
    /// Starts an entry of table `name`.
    pub(crate) fn entry(&self, name: &str) -> Result<Entry<'_>> {
        Ok(Entry {
            info: self,
            table: self.table(name)?,
            action: None,
            key: Vec::new(),
            data: Vec::new(),
            target: None,
        })
    }
}

/// `v` as `width` bits, big-endian, in the fewest whole bytes.
pub(crate) fn encode(field: &Field, v: u64) -> std::result::Result<Vec<u8>, String> {
    if field.width == 0 {
        return Err(format!("{} is not an integer field", field.name));
    }
    if field.width < 64 && v >> field.width != 0 {
        return Err(format!(
            "{v} does not fit {} ({} bits)",
            field.name, field.width
        ));
    }
    let bytes = field.width.div_ceil(8) as usize;
    Ok(v.to_be_bytes()[8 - bytes.min(8)..].to_vec())
}

/// Big-endian bytes as an integer (at most 8 of them).
pub(crate) fn decode(bytes: &[u8]) -> std::result::Result<u64, String> {
    if bytes.len() > 8 {
        return Err(format!("a value of {} bytes", bytes.len()));
    }
    Ok(bytes.iter().fold(0, |acc, &b| (acc << 8) | u64::from(b)))
}

impl<'a> Entry<'a> {
    fn fail(&self, message: String) -> ControlError {
        self.info.missing(message)
    }

    /// An exact key field.
    pub(crate) fn key(mut self, name: &str, v: u64) -> Result<Self> {
        let field = self.table.key(name).map_err(|m| self.fail(m))?;
        let value = encode(field, v).map_err(|m| bad_value(self.table, m))?;
        self.key.push(bfrt::KeyField {
            field_id: field.id,
            match_type: Some(bfrt::key_field::MatchType::Exact(bfrt::key_field::Exact {
                value,
            })),
        });
        Ok(self)
    }

    /// The entry's action (match-action tables).
    pub(crate) fn action(mut self, name: &str) -> Result<Self> {
        self.action = Some(self.table.action(name).map_err(|m| self.fail(m))?);
        Ok(self)
    }

    /// An action parameter, or, without an action, a data field.
    pub(crate) fn set(self, name: &str, v: u64) -> Result<Self> {
        let field = self.data_field(name)?;
        let value = encode(field, v).map_err(|m| bad_value(self.table, m))?;
        self.push(field, bfrt::data_field::Value::Stream(value))
    }

    /// A repeated integer data field (a fixed table's list).
    pub(crate) fn ints(self, name: &str, val: Vec<u32>) -> Result<Self> {
        let field = self.data_field(name)?;
        self.push(
            field,
            bfrt::data_field::Value::IntArrVal(bfrt::data_field::IntArray { val }),
        )
    }

    /// A string data field, one of the values its table lists.
    pub(crate) fn text(self, name: &str, v: &str) -> Result<Self> {
        let field = self.data_field(name)?;
        match &field.text {
            None => {
                return Err(bad_value(
                    self.table,
                    format!("{name} is not a string field"),
                ))
            }
            Some(choices) if !choices.is_empty() && !choices.iter().any(|c| c == v) => {
                return Err(bad_value(
                    self.table,
                    format!("{name} takes one of {choices:?}, not {v:?}"),
                ))
            }
            Some(_) => {}
        }
        self.push(field, bfrt::data_field::Value::StrVal(v.to_string()))
    }

    /// The device and pipe the entry is written to, in place of the
    /// request's (all pipes): for the traffic manager's per-pipe tables.
    pub(crate) fn on(mut self, target: bfrt::TargetDevice) -> Self {
        self.target = Some(target);
        self
    }

    /// A repeated boolean data field.
    pub(crate) fn bools(self, name: &str, val: Vec<bool>) -> Result<Self> {
        let field = self.data_field(name)?;
        self.push(
            field,
            bfrt::data_field::Value::BoolArrVal(bfrt::data_field::BoolArray { val }),
        )
    }

    fn push(mut self, field: &Field, value: bfrt::data_field::Value) -> Result<Self> {
        self.data.push(bfrt::DataField {
            field_id: field.id,
            value: Some(value),
        });
        Ok(self)
    }

    fn data_field(&self, name: &str) -> Result<&'a Field> {
        match self.action {
            Some(a) => a.param(name),
            None => self.table.data(name),
        }
        .map_err(|m| self.fail(m))
    }

    /// The entity, with data only when something was set.
    pub(crate) fn build(self) -> bfrt::Entity {
        let data = (self.action.is_some() || !self.data.is_empty()).then(|| bfrt::TableData {
            action_id: self.action.map_or(0, |a| a.id),
            fields: self.data,
        });
        let key = (!self.key.is_empty()).then_some(bfrt::TableKey { fields: self.key });
        bfrt::Entity {
            entity: Some(bfrt::entity::Entity::TableEntry(bfrt::TableEntry {
                table_id: self.table.id,
                value: key.map(bfrt::table_entry::Value::Key),
                data,
                entry_tgt: self.target,
                ..Default::default()
            })),
        }
    }
}

fn bad_value(table: &Table, message: String) -> ControlError {
    ControlError::Protocol(format!("table {}: {message}", table.name))
}

/// An update of `kind` for `entity`.
pub(crate) fn update(kind: bfrt::update::Type, entity: bfrt::Entity) -> bfrt::Update {
    bfrt::Update {
        r#type: kind as i32,
        entity: Some(entity),
    }
}

/// A table entry read back, its values looked up by name.
pub(crate) struct ReadEntry<'a> {
    table: &'a Table,
    entry: bfrt::TableEntry,
}

impl<'a> ReadEntry<'a> {
    /// The entries of `entities` that belong to `table`.
    pub(crate) fn of(table: &'a Table, entities: Vec<bfrt::Entity>) -> Vec<ReadEntry<'a>> {
        entities
            .into_iter()
            .filter_map(|e| match e.entity {
                Some(bfrt::entity::Entity::TableEntry(t)) if t.table_id == table.id => Some(t),
                _ => None,
            })
            .map(|entry| ReadEntry { table, entry })
            .collect()
    }

    fn unreadable(&self, message: String) -> ControlError {
        ControlError::Protocol(format!(
            "an entry of {} read back from the switch: {message}",
            self.table.name
        ))
    }

    /// An exact key field's value.
    pub(crate) fn key(&self, name: &str) -> Result<u64> {
        let field = self.table.key(name).map_err(|m| self.unreadable(m))?;
        let Some(bfrt::table_entry::Value::Key(key)) = &self.entry.value else {
            return Err(self.unreadable("no key".into()));
        };
        let value = key
            .fields
            .iter()
            .find(|f| f.field_id == field.id)
            .and_then(|f| match &f.match_type {
                Some(bfrt::key_field::MatchType::Exact(e)) => Some(e.value.as_slice()),
                _ => None,
            })
            .ok_or_else(|| self.unreadable(format!("no exact {name}")))?;
        decode(value).map_err(|m| self.unreadable(m))
    }

    /// The name of the entry's action.
    pub(crate) fn action(&self) -> Result<&'a str> {
        let id = self.entry.data.as_ref().map_or(0, |d| d.action_id);
        self.table
            .actions()
            .iter()
            .find(|a| a.id == id)
            .map(|a| a.name.as_str())
            .ok_or_else(|| self.unreadable(format!("unknown action id {id}")))
    }

    /// An action parameter's or a data field's integer value.
    pub(crate) fn get(&self, name: &str) -> Result<u64> {
        match self.value(name)? {
            bfrt::data_field::Value::Stream(bytes) => decode(bytes).map_err(|m| self.unreadable(m)),
            _ => Err(self.unreadable(format!("{name} is not bytes"))),
        }
    }

    /// A repeated integer data field's values.
    pub(crate) fn ints(&self, name: &str) -> Result<&[u32]> {
        match self.value(name)? {
            bfrt::data_field::Value::IntArrVal(a) => Ok(&a.val),
            _ => Err(self.unreadable(format!("{name} is not a list of integers"))),
        }
    }

    /// The value of an action parameter or data field, as sent.
    fn value(&self, name: &str) -> Result<&bfrt::data_field::Value> {
        let id = match self.action() {
            Ok(action) => self
                .table
                .action(action)
                .and_then(|a| a.param(name).map(|p| p.id)),
            Err(_) => self.table.data(name).map(|f| f.id),
        }
        .map_err(|m| self.unreadable(m))?;
        let field = self
            .entry
            .data
            .iter()
            .flat_map(|d| &d.fields)
            .find(|f| f.field_id == id)
            .ok_or_else(|| self.unreadable(format!("no {name}")))?;
        field
            .value
            .as_ref()
            .ok_or_else(|| self.unreadable(format!("{name} has no value")))
    }

    /// The entry's key, alone (to delete it).
    pub(crate) fn key_entity(&self) -> bfrt::Entity {
        bfrt::Entity {
            entity: Some(bfrt::entity::Entity::TableEntry(bfrt::TableEntry {
                table_id: self.entry.table_id,
                value: self.entry.value.clone(),
                ..Default::default()
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(width: u32) -> Field {
        Field {
            name: "f".into(),
            id: 1,
            width,
            boolean: false,
            repeated: false,
            text: None,
        }
    }

    #[test]
    fn values_take_their_width_in_whole_bytes_and_must_fit_it() {
        assert_eq!(encode(&field(9), 300).unwrap(), vec![1, 44]);
        assert_eq!(encode(&field(48), 0x0200_0000_0001).unwrap().len(), 6);
        assert_eq!(encode(&field(64), u64::MAX).unwrap(), vec![0xff; 8]);
        assert_eq!(
            encode(&field(9), 512).unwrap_err(),
            "512 does not fit f (9 bits)"
        );
        assert_eq!(decode(&[1, 44]).unwrap(), 300);
        assert!(decode(&[0; 9]).is_err());
        assert_eq!(
            encode(&field(0), 1).unwrap_err(),
            "f is not an integer field"
        );
    }
}
