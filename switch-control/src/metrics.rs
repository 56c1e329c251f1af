//! The switch's counters for Prometheus (`inagg emu --metrics`, `inagg
//! controller --metrics`): the same counters `inagg ctl` shows, read through
//! the same APIs at each scrape, so a scrape is as fresh as a `ctl counters`.

use inagg_netio::metrics::{labels as with, Exposition};
use inagg_switch_api::counters::{Counters, DropReason, JobCounters};

use crate::target::QueueReport;

/// What an aggregator counts, as samples of an [`Exposition`].
pub trait SwitchMetrics {
    /// An aggregator's switch-wide counters, labelled with `site`.
    fn switch(&mut self, site: &[(&str, &str)], c: &Counters);
    /// One job's counters; `name` is the controller's name, if any.
    fn job(&mut self, site: &[(&str, &str)], id: u16, name: Option<&str>, c: &JobCounters);
    /// Each paced port's queues.
    fn queues(&mut self, site: &[(&str, &str)], q: &QueueReport);
}

impl SwitchMetrics for Exposition {
    /// An aggregator's switch-wide counters, labelled with `site`.
    fn switch(&mut self, site: &[(&str, &str)], c: &Counters) {
        let help = "Packets received by the aggregator's data plane.";
        self.counter("inagg_rx_packets_total", help, site, c.rx_packets);
        let help = "Bytes received by the aggregator's data plane.";
        self.counter("inagg_rx_bytes_total", help, site, c.rx_bytes);
        let help = "Packets sent by the aggregator's data plane.";
        self.counter("inagg_tx_packets_total", help, site, c.tx_packets);
        let help = "Bytes sent by the aggregator's data plane.";
        self.counter("inagg_tx_bytes_total", help, site, c.tx_bytes);
        for r in DropReason::ALL {
            let labels = with(site, &[("reason", r.name())]);
            let help = "Packets dropped, by reason (docs/PROTOCOL.md, Admission).";
            self.counter("inagg_drops_total", help, &labels, c.dropped(r));
        }
    }

    /// One job's counters; `name` is the controller's name, if any.
    fn job(&mut self, site: &[(&str, &str)], id: u16, name: Option<&str>, c: &JobCounters) {
        let id = id.to_string();
        let mut labels = with(site, &[("job", &id)]);
        if let Some(n) = name {
            labels.push(("name", n));
        }
        let rows: [(&'static str, &'static str, u64); 6] = [
            (
                "inagg_job_contributions_total",
                "Contributions admitted to the job's slots.",
                c.contributions,
            ),
            (
                "inagg_job_results_total",
                "Rounds completed and multicast.",
                c.results,
            ),
            (
                "inagg_job_resent_results_total",
                "Stored results sent again, to a worker that retransmitted or queried.",
                c.resent_results,
            ),
            (
                "inagg_job_queries_total",
                "Workers' queries about their slots, answered.",
                c.queries,
            ),
            (
                "inagg_job_duplicates_total",
                "Retransmissions to a round still pending, dropped.",
                c.duplicates,
            ),
            (
                "inagg_job_dropped_total",
                "The job's packets dropped for any reason.",
                c.dropped,
            ),
        ];
        for (name, help, v) in rows {
            self.counter(name, help, &labels, v);
        }
    }

    /// Each paced port's queues.
    fn queues(&mut self, site: &[(&str, &str)], q: &QueueReport) {
        for port in &q.ports {
            let p = port.port.to_string();
            for (i, s) in port.queues.iter().enumerate() {
                let queue = i.to_string();
                let labels = with(site, &[("port", &p), ("queue", &queue)]);
                let help = "Packets sent from an egress queue.";
                self.counter("inagg_queue_tx_packets_total", help, &labels, s.tx_packets);
                let help = "Bytes sent from an egress queue.";
                self.counter("inagg_queue_tx_bytes_total", help, &labels, s.tx_bytes);
                let help = "Packets tail-dropped by a full egress queue.";
                self.counter("inagg_queue_drops_total", help, &labels, s.drops);
                let help = "Bytes waiting in an egress queue now.";
                self.gauge(
                    "inagg_queue_depth_bytes",
                    help,
                    &labels,
                    s.depth_bytes as u64,
                );
                let help = "The most bytes an egress queue has held.";
                let max = s.max_depth_bytes as u64;
                self.gauge("inagg_queue_max_depth_bytes", help, &labels, max);
            }
        }
    }
}

/// An emulator's exposition, read through `t` (an in-process reader, in
/// `inagg emu --metrics`).
pub fn emulator(t: &mut dyn crate::target::Target) -> Result<String, String> {
    let mut e = Exposition::default();
    e.switch(&[], &t.counters().map_err(|e| e.to_string())?);
    for j in t.jobs().map_err(|e| e.to_string())? {
        e.job(&[], j.spec.id, None, &j.counters);
    }
    e.queues(&[], &t.queues().map_err(|e| e.to_string())?);
    let info = t.info().map_err(|e| e.to_string())?;
    let help = "Bytes of aggregator values the pools may take (inagg emu --memory-mib).";
    e.gauge("inagg_memory_bytes", help, &[], info.memory);
    let help = "Bytes of aggregator values the installed pools take.";
    e.gauge("inagg_memory_used_bytes", help, &[], info.memory_used);
    Ok(e.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_labelled_by_site_reason_and_job() {
        let mut e = Exposition::default();
        let mut c = Counters {
            rx_packets: 7,
            ..Counters::default()
        };
        c.drop(DropReason::UnknownJob);
        e.switch(&[("site", "a")], &c);
        e.switch(&[("site", "b")], &Counters::default());
        let jc = JobCounters {
            results: 3,
            ..JobCounters::default()
        };
        e.job(&[("site", "a")], 5, Some("x\"y"), &jc);
        let text = e.render();
        assert!(text.contains("# TYPE inagg_rx_packets_total counter\n"));
        assert!(text.contains(
            "inagg_rx_packets_total{site=\"a\"} 7\ninagg_rx_packets_total{site=\"b\"} 0\n"
        ));
        assert!(text.contains("inagg_drops_total{site=\"a\",reason=\"unknown_job\"} 1\n"));
        assert!(text.contains("inagg_job_results_total{site=\"a\",job=\"5\",name=\"x\\\"y\"} 3\n"));
        // Each family's HELP appears once.
        assert_eq!(text.matches("# HELP inagg_drops_total").count(), 1);
    }
}
