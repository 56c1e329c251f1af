//! The controller's exposition for Prometheus (`inagg controller
//! --metrics`): every aggregator's counters and each job's under its name,
//! read through the controller's API at each scrape.

use std::net::SocketAddr;

use inagg_controller_api::Client;
use inagg_netio::metrics::Exposition;
use inagg_switch_control::metrics::SwitchMetrics;

/// A controller's exposition: every aggregator's counters (labelled with
/// its role and control address) and each job's under its name, read
/// through the controller's API.
pub fn controller(api: SocketAddr, token: Option<String>) -> Result<String, String> {
    let mut c = Client::connect(api, token).map_err(|e| e.to_string())?;
    let mut e = Exposition::default();
    for s in c.stats().map_err(|e| e.to_string())? {
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
    Ok(e.render())
}
