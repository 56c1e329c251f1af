//! Priority queues on bmv2: p4/v1model's priority_to_queue, one entry per
//! priority class not on queue 0 (docs/PROTOCOL.md, "Egress queues").
//!
//! The queues themselves are bmv2's: `simple_switch_grpc ... --
//! --priority-queues 8` gives each port 8 strict-priority queues, queue 7
//! served first, and a packet sent to a queue the switch does not have is
//! dropped (p4/README.md, "Priority queues"). So a queue of 8 or more is
//! refused here, as the emulator refuses it; a class moved back to queue 0
//! loses its entry, since the table's default action is queue 0.

use inagg_switch_api::queues::{check_queue, ClassQueue};

use super::{
    action, entry_action, exact, match_value, narrow, param, param_value, table_entity, update,
    Bmv2Target,
};
use crate::bmv2::p4info::names::{key, param as p, SET_QUEUE};
use crate::bmv2::proto::p4::v1 as p4;
use crate::target::{ControlError, Result};

const TABLE: &str = "priority_to_queue";

impl Bmv2Target {
    /// The classes on a queue other than 0, read from priority_to_queue.
    pub(super) fn queue_map(&self) -> Result<Vec<ClassQueue>> {
        let t = &self.schema.priority_to_queue;
        let entities = self
            .client
            .read(TABLE, vec![table_entity(t.id, Vec::new(), None)])?;
        let mut map = Vec::new();
        for entity in entities {
            let Some(p4::entity::Entity::TableEntry(e)) = entity.entity else {
                continue;
            };
            if e.table_id != t.id {
                continue;
            }
            let a = entry_action(TABLE, &e, t.set_queue, SET_QUEUE)?;
            map.push(ClassQueue {
                class: narrow(
                    TABLE,
                    key::PRIORITY,
                    match_value(TABLE, &e, t.priority, key::PRIORITY)?,
                )?,
                queue: narrow(TABLE, p::QUEUE, param_value(TABLE, a, t.queue, p::QUEUE)?)?,
            });
        }
        map.sort_by_key(|m| m.class);
        Ok(map)
    }

    /// Sends class `class` by queue `queue`: inserts, changes or (queue 0)
    /// removes the class's entry.
    pub(super) fn map_class(&self, class: u8, queue: u8) -> Result<()> {
        check_queue(queue).map_err(ControlError::Job)?;
        let t = &self.schema.priority_to_queue;
        let what = format!("class {class}");
        let key = vec![exact(t.priority, u64::from(class), &what)?];
        let had = self.queue_map()?.iter().any(|m| m.class == class);
        let kind = match (had, queue) {
            (false, 0) => return Ok(()),
            (true, 0) => {
                let entity = table_entity(t.id, key, None);
                return self.client.write(
                    &format!("remove {TABLE} entry of {what}"),
                    vec![update(p4::update::Type::Delete, entity)],
                );
            }
            (true, _) => p4::update::Type::Modify,
            (false, _) => p4::update::Type::Insert,
        };
        let set = action(
            t.set_queue,
            vec![param(t.queue, u64::from(queue), &format!("queue {queue}"))?],
        );
        self.client.write(
            &format!("{TABLE}: {what} -> queue {queue}"),
            vec![update(kind, table_entity(t.id, key, Some(set)))],
        )
    }
}
