//! The controller's exposition for Prometheus (`inagg controller
//! --metrics`): every aggregator's counters and each job's under its name,
//! read from the controller in process at each scrape
//! ([`crate::Controller::stats_source`]).

use inagg_controller_api::SiteStats;
use inagg_netio::metrics::Exposition;
use inagg_switch_control::metrics::SwitchMetrics;

/// A controller's exposition: every aggregator's counters (labelled with
/// its role and control address) and each job's under its name and tenant.
pub fn controller(sites: &[SiteStats]) -> String {
    let mut e = Exposition::default();
    for s in sites {
        let addr = s.control.to_string();
        let site = [("role", s.role.as_str()), ("site", addr.as_str())];
        let help = "Whether the controller could read the aggregator's counters.";
        e.gauge("inagg_site_up", help, &site, u64::from(s.counters.is_ok()));
        if let Ok(counters) = &s.counters {
            e.switch(&site, counters);
        }
        for j in &s.jobs {
            let mut labels = site.to_vec();
            if let Some(t) = &j.tenant {
                labels.push(("tenant", t.as_str()));
            }
            e.job(&labels, j.id, j.name.as_deref(), &j.counters);
        }
    }
    e.render()
}
