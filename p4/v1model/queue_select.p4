/*
 * QueueSelect: the result's priority class (docs/PROTOCOL.md, "Header":
 * priority, echoed in results) picks the egress queue it waits in.
 *
 * bmv2 (simple_switch / simple_switch_grpc started with `--priority-queues
 * N`) serves the queue of the highest standard_metadata.priority first and
 * drops a packet whose priority is N or more, so the control plane maps
 * classes to 0..N-1. Without the option there is one queue and only 0 is
 * valid: the default action, for every class without an entry, is queue 0.
 */
#ifndef _INAGG_V1MODEL_QUEUE_SELECT_P4_
#define _INAGG_V1MODEL_QUEUE_SELECT_P4_

control QueueSelect(in headers_t hdr, inout standard_metadata_t standard_metadata) {

    action set_queue(bit<3> queue) {
        standard_metadata.priority = queue;
    }

    table priority_to_queue {
        key = {
            hdr.inagg.priority : exact @name("priority");
        }
        actions = {
            set_queue;
        }
        default_action = set_queue(0);
        size = 256;
    }

    apply {
        priority_to_queue.apply();
    }
}

#endif /* _INAGG_V1MODEL_QUEUE_SELECT_P4_ */
