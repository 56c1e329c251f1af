/*
 * QueueSelect: a result's priority class (docs/PROTOCOL.md, "Header":
 * priority, echoed in results) picks its egress queue, ig_intr_md_for_tm.qid.
 * How the queues of a port are scheduled (strict priority, weights) is
 * traffic-manager configuration the control plane does through BFRuntime.
 * Classes without an entry use queue 0.
 */
#ifndef _INAGG_TNA_QUEUE_SELECT_P4_
#define _INAGG_TNA_QUEUE_SELECT_P4_

control QueueSelect(in ingress_headers_t hdr,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    action set_queue(QueueId_t queue) {
        ig_tm_md.qid = queue;
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

#endif /* _INAGG_TNA_QUEUE_SELECT_P4_ */
