//! BF Runtime's description of a program, `bf-rt.json`: every table with
//! its id, key fields, actions and data fields. bf-p4c writes one for the
//! P4 program; the driver has another for its fixed tables (`$pre.node`,
//! `$pre.mgid`, ...), which the switch serves with the program's
//! (`GetForwardingPipelineConfig`, `non_p4_config`). Ids are the
//! compiler's and the driver's: the control plane resolves every name it
//! uses here, once, and never writes an id of its own.
//!
//! Widths: a P4 table's fields are `{"type": "bytes", "width": N}`; a fixed
//! table's are `uint8` ... `uint64` or `bool`. Either way [`Field::width`]
//! is in bits, and values go on the wire as big-endian bytes of
//! `ceil(width / 8)` (`bytes` fields) or in the typed slot (`bool`).

use std::collections::HashMap;

use serde::Deserialize;

use crate::target::{ControlError, Result};

/// One table, as the control plane sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Its full name (`pipe.InaggIngress.admission.job_table`, `$pre.node`).
    pub name: String,
    /// Its id.
    pub id: u32,
    /// `MatchAction_Direct`, `Register`, `Counter`, `PreNode`, ...
    pub table_type: String,
    /// Entries it holds (registers and counters: cells).
    pub size: u64,
    keys: Vec<Field>,
    actions: Vec<Action>,
    data: Vec<Field>,
}

/// A key field, action parameter or data field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its name (`job`, `$REGISTER_INDEX`, `$MULTICAST_NODE_ID`).
    pub name: String,
    /// Its id within its table (keys, data) or action (parameters).
    pub id: u32,
    /// Width in bits (1 for `bool`; 0 for what is not an integer: strings,
    /// floats).
    pub width: u32,
    /// A `bool` field (sent as `bool_val`), not bytes.
    pub boolean: bool,
    /// A list (`int_arr_val`, `bool_arr_val`).
    pub repeated: bool,
    /// A `string` field (sent as `str_val`): the values it takes, as the
    /// driver's tables list them (`max_priority`: `LOW`, `0` ... `7`,
    /// `HIGH`); empty if any string goes.
    pub text: Option<Vec<String>>,
}

/// An action and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Its full name (`InaggIngress.admission.set_job`).
    pub name: String,
    /// Its id.
    pub id: u32,
    params: Vec<Field>,
}

/// Every table of one or more bf-rt.json files, by name.
#[derive(Debug, Clone, Default)]
pub struct BfrtInfo {
    tables: HashMap<String, Table>,
    /// Where the descriptions came from, for error messages.
    source: String,
}

impl BfrtInfo {
    /// Reads one bf-rt.json (`source` names it in errors).
    pub fn parse(json: &[u8], source: &str) -> Result<BfrtInfo> {
        let bad = |message: String| ControlError::P4Info {
            source_name: source.to_string(),
            message,
        };
        // Through a Value first: the driver's own files repeat a key here
        // and there (tf2.tm.l1_node's `repeated`), which the driver's JSON
        // reader takes, the last one winning, and a derived reader refuses.
        let file: json::File = serde_json::from_slice::<serde_json::Value>(json)
            .and_then(serde_json::from_value)
            .map_err(|e| bad(format!("not a bf-rt.json: {e}")))?;
        let mut tables = HashMap::new();
        for t in file.tables {
            let table = t.into_table().map_err(|m| bad(m.to_string()))?;
            if let Some(old) = tables.insert(table.name.clone(), table) {
                return Err(bad(format!("table {} is described twice", old.name)));
            }
        }
        Ok(BfrtInfo {
            tables,
            source: source.to_string(),
        })
    }

    /// Adds `other`'s tables (the driver's fixed tables to the program's).
    pub fn merge(&mut self, other: BfrtInfo) -> Result<()> {
        for (name, table) in other.tables {
            if self.tables.contains_key(&name) {
                return Err(self.missing(format!("table {name} is in both descriptions")));
            }
            self.tables.insert(name, table);
        }
        self.source = format!("{} and {}", self.source, other.source);
        Ok(())
    }

    /// The table named `name`, or an error saying the program lacks it.
    pub fn table(&self, name: &str) -> Result<&Table> {
        self.tables
            .get(name)
            .ok_or_else(|| self.missing(format!("no table {name}")))
    }

    /// Every table's name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tables.keys().map(String::as_str)
    }

    /// An error about these descriptions: the pipeline is not inagg's
    /// p4/tna, or another version of it.
    pub fn missing(&self, message: String) -> ControlError {
        ControlError::P4Info {
            source_name: self.source.clone(),
            message: format!("{message}: is the pipeline inagg's p4/tna, built from this tree?"),
        }
    }
}

impl Table {
    /// The key field `name`.
    pub fn key(&self, name: &str) -> std::result::Result<&Field, String> {
        find(&self.keys, name).ok_or_else(|| format!("table {} has no key {name}", self.name))
    }

    /// The action `name` (its full name, or the part after the last dot).
    pub fn action(&self, name: &str) -> std::result::Result<&Action, String> {
        self.actions
            .iter()
            .find(|a| a.name == name || a.name.rsplit('.').next() == Some(name))
            .ok_or_else(|| format!("table {} has no action {name}", self.name))
    }

    /// The data field `name` (registers' cells, counters' specs, fixed
    /// tables' fields).
    pub fn data(&self, name: &str) -> std::result::Result<&Field, String> {
        find(&self.data, name)
            .ok_or_else(|| format!("table {} has no data field {name}", self.name))
    }

    /// Every key field, in the compiler's order.
    pub fn keys(&self) -> &[Field] {
        &self.keys
    }

    /// Every action.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Every data field (a register's: one per cell of a pair).
    pub fn data_fields(&self) -> &[Field] {
        &self.data
    }
}

impl Action {
    /// The parameter `name`.
    pub fn param(&self, name: &str) -> std::result::Result<&Field, String> {
        find(&self.params, name)
            .ok_or_else(|| format!("action {} has no parameter {name}", self.name))
    }

    /// Every parameter, in the compiler's order.
    pub fn params(&self) -> &[Field] {
        &self.params
    }
}

fn find<'a>(fields: &'a [Field], name: &str) -> Option<&'a Field> {
    fields.iter().find(|f| f.name == name)
}

/// The file's shape: only what the control plane reads (serde skips the
/// rest: annotations, attributes, supported operations).
mod json {
    use super::{Action, Deserialize, Field, Table};

    #[derive(Deserialize)]
    pub(super) struct File {
        pub tables: Vec<TableJson>,
    }

    #[derive(Deserialize)]
    pub(super) struct TableJson {
        name: String,
        id: u32,
        table_type: String,
        #[serde(default)]
        size: u64,
        #[serde(default)]
        key: Vec<FieldJson>,
        #[serde(default)]
        action_specs: Vec<ActionJson>,
        #[serde(default)]
        data: Vec<DataJson>,
    }

    #[derive(Deserialize)]
    struct ActionJson {
        id: u32,
        name: String,
        #[serde(default)]
        data: Vec<ParamJson>,
    }

    /// An action parameter: flat in bf-p4c's files, wrapped like a data
    /// field (`{"singleton": ...}`) in the driver's (tf1.tm.ppg.cfg).
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ParamJson {
        Wrapped { singleton: FieldJson },
        Flat(FieldJson),
    }

    impl ParamJson {
        fn field(self) -> FieldJson {
            match self {
                ParamJson::Wrapped { singleton } | ParamJson::Flat(singleton) => singleton,
            }
        }
    }

    /// A table's data entry: one field, or a choice of several (`oneof`,
    /// which inagg never writes, so only the first is kept).
    #[derive(Deserialize)]
    struct DataJson {
        singleton: Option<FieldJson>,
        #[serde(default)]
        oneof: Vec<FieldJson>,
    }

    #[derive(Deserialize)]
    struct FieldJson {
        id: u32,
        name: String,
        #[serde(default)]
        repeated: bool,
        /// None for a container (a list of fields: dynamic hashing's),
        /// which the control plane never writes.
        #[serde(rename = "type")]
        ty: Option<TypeJson>,
    }

    #[derive(Deserialize)]
    struct TypeJson {
        #[serde(rename = "type")]
        ty: String,
        width: Option<u32>,
        #[serde(default)]
        choices: Vec<String>,
    }

    impl TableJson {
        pub fn into_table(self) -> Result<Table, String> {
            let name = self.name;
            let field = |f: FieldJson| f.into_field(&name);
            let keys = self.key.into_iter().map(field).collect::<Result<_, _>>()?;
            let data = self
                .data
                .into_iter()
                .filter_map(|d| d.singleton.or_else(|| d.oneof.into_iter().next()))
                .filter(|f| f.ty.is_some())
                .map(field)
                .collect::<Result<_, _>>()?;
            let actions = self
                .action_specs
                .into_iter()
                .map(|a| {
                    let params = a
                        .data
                        .into_iter()
                        .map(|p| field(p.field()))
                        .collect::<Result<_, _>>()?;
                    Ok(Action {
                        name: a.name,
                        id: a.id,
                        params,
                    })
                })
                .collect::<Result<_, String>>()?;
            Ok(Table {
                name: name.clone(),
                id: self.id,
                table_type: self.table_type,
                size: self.size,
                keys,
                actions,
                data,
            })
        }
    }

    impl FieldJson {
        fn into_field(self, table: &str) -> Result<Field, String> {
            let ty = self
                .ty
                .ok_or_else(|| format!("table {table}: field {} has no type", self.name))?;
            // Types inagg never writes (string, float, ...) get width 0,
            // which [`super::super::entry::encode`] refuses.
            let (width, boolean) = match (ty.ty.as_str(), ty.width) {
                ("bytes", Some(w)) => (w, false),
                ("bool", _) => (1, true),
                (t, _) => match t.strip_prefix("uint").map(str::parse::<u32>) {
                    Some(Ok(w @ (8 | 16 | 32 | 64))) => (w, false),
                    _ => (0, false),
                },
            };
            let text = (ty.ty == "string").then_some(ty.choices);
            Ok(Field {
                name: self.name,
                id: self.id,
                width,
                boolean,
                repeated: self.repeated,
                text,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P4: &str = r#"{"schema_version": "1.0.0", "tables": [
      {"name": "pipe.InaggIngress.admission.job_table", "id": 39224789,
       "table_type": "MatchAction_Direct", "size": 1024,
       "key": [{"id": 1, "name": "job", "repeated": false, "annotations": [],
                "mandatory": false, "match_type": "Exact",
                "type": {"type": "bytes", "width": 16}}],
       "action_specs": [{"id": 21, "name": "InaggIngress.admission.set_job",
          "action_scope": "TableAndDefault", "annotations": [],
          "data": [{"id": 1, "name": "worker_count", "repeated": false,
                    "mandatory": true, "read_only": false, "annotations": [],
                    "type": {"type": "bytes", "width": 16}}]}],
       "data": [], "supported_operations": [], "attributes": []},
      {"name": "pipe.InaggIngress.slot_state.bitmap_lo", "id": 2344568330,
       "table_type": "Register", "size": 16384,
       "key": [{"id": 65556, "name": "$REGISTER_INDEX", "match_type": "Exact",
                "type": {"type": "uint32"}}],
       "action_specs": [],
       "data": [{"mandatory": false, "read_only": false, "singleton": {"id": 65557,
          "name": "InaggIngress.slot_state.bitmap_lo.set0", "repeated": false,
          "annotations": [], "type": {"type": "bytes", "width": 32}}}]}
    ], "learn_filters": []}"#;

    const FIXED: &str = r#"{"tables": [
      {"name": "$pre.node", "id": 4278321154, "table_type": "PreNode", "size": 4096,
       "key": [{"id": 1, "name": "$MULTICAST_NODE_ID", "type": {"type": "uint32"}}],
       "data": [{"singleton": {"id": 1, "name": "$MULTICAST_RID", "repeated": false,
                 "type": {"type": "uint16"}}},
                {"singleton": {"id": 3, "name": "$DEV_PORT", "repeated": true,
                 "type": {"type": "uint32"}}}]},
      {"name": "$pre.mgid", "id": 4278321153, "table_type": "PreMgid", "size": 65536,
       "key": [{"id": 1, "name": "$MGID", "type": {"type": "uint16"}}],
       "data": [{"singleton": {"id": 2, "name": "$MULTICAST_NODE_L1_XID_VALID",
                 "repeated": true, "type": {"type": "bool"}}}]}
    ]}"#;

    #[test]
    fn names_resolve_to_the_compilers_and_the_drivers_ids() {
        let mut info = BfrtInfo::parse(P4.as_bytes(), "bf-rt.json").unwrap();
        info.merge(BfrtInfo::parse(FIXED.as_bytes(), "the driver").unwrap())
            .unwrap();
        let job = info.table("pipe.InaggIngress.admission.job_table").unwrap();
        assert_eq!((job.id, job.size), (39224789, 1024));
        assert_eq!(job.key("job").unwrap().width, 16);
        let set_job = job.action("set_job").unwrap();
        assert_eq!(set_job.id, 21);
        assert_eq!(set_job.param("worker_count").unwrap().id, 1);
        let bitmap = info
            .table("pipe.InaggIngress.slot_state.bitmap_lo")
            .unwrap();
        assert_eq!(bitmap.key("$REGISTER_INDEX").unwrap().width, 32);
        let cell = bitmap
            .data("InaggIngress.slot_state.bitmap_lo.set0")
            .unwrap();
        assert!(!cell.repeated && cell.width == 32);
        let node = info.table("$pre.node").unwrap();
        assert_eq!(node.data("$MULTICAST_RID").unwrap().width, 16);
        let mgid = info.table("$pre.mgid").unwrap();
        assert!(mgid.data("$MULTICAST_NODE_L1_XID_VALID").unwrap().boolean);
    }

    /// The driver's own files wrap action parameters like data fields,
    /// repeat a key now and then, and have string fields with choices.
    #[test]
    fn the_drivers_files_read_as_the_driver_reads_them() {
        let json = r#"{"tables": [
          {"name": "tf1.tm.ppg.cfg", "id": 7, "table_type": "TmPpgCfg", "size": 2,
           "key": [{"id": 1, "name": "ppg_id", "type": {"type": "uint32"}}],
           "action_specs": [{"id": 1, "name": "dev_port", "data": [
             {"mandatory": false, "singleton": {"id": 1, "name": "dev_port",
              "repeated": true, "repeated": false, "type": {"type": "uint32"}}}]}],
           "data": [{"singleton": {"id": 4, "name": "max_priority", "repeated": false,
              "type": {"type": "string", "choices": ["LOW", "0", "HIGH"]}}}]}
        ]}"#;
        let info = BfrtInfo::parse(json.as_bytes(), "the driver").unwrap();
        let t = info.table("tf1.tm.ppg.cfg").unwrap();
        let port = t.action("dev_port").unwrap().param("dev_port").unwrap();
        assert_eq!((port.id, port.width, port.repeated), (1, 32, false));
        let level = t.data("max_priority").unwrap();
        assert_eq!(level.width, 0);
        assert_eq!(
            level.text.as_deref(),
            Some(&["LOW", "0", "HIGH"].map(String::from)[..])
        );
    }

    #[test]
    fn what_the_program_lacks_is_named_with_its_source() {
        let info = BfrtInfo::parse(P4.as_bytes(), "p4/build/tna/bf-rt.json").unwrap();
        let err = info
            .table("pipe.InaggIngress.admission.upstream_table")
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("no table pipe.InaggIngress.admission.upstream_table"),
            "{text}"
        );
        assert!(text.contains("p4/build/tna/bf-rt.json"), "{text}");
        let job = info.table("pipe.InaggIngress.admission.job_table").unwrap();
        assert_eq!(
            job.action("set_job").unwrap().param("detours").unwrap_err(),
            "action InaggIngress.admission.set_job has no parameter detours"
        );
        let err = BfrtInfo::parse(b"{\"tables\": 3}", "x").unwrap_err();
        assert!(err.to_string().contains("not a bf-rt.json"), "{err}");
        // A type inagg never writes parses, with width 0.
        let odd = P4.replace("\"uint32\"", "\"string\"");
        let odd = BfrtInfo::parse(odd.as_bytes(), "x").unwrap();
        let bitmap = odd.table("pipe.InaggIngress.slot_state.bitmap_lo").unwrap();
        assert_eq!(bitmap.key("$REGISTER_INDEX").unwrap().width, 0);
        let mut twice = BfrtInfo::parse(P4.as_bytes(), "a").unwrap();
        let err = twice
            .merge(BfrtInfo::parse(P4.as_bytes(), "b").unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("in both descriptions"), "{err}");
    }
}
