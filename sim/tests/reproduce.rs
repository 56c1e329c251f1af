//! Each reproduction, on fixed seeds, shows its paper's headline direction:
//! every row pinned here would fail if the policy were swapped for its
//! baseline (or the baseline for the policy).

use inagg_sim::report::Row;
use inagg_sim::{reproduce, Options, Report};

fn quick() -> Options {
    Options {
        trials: 3,
        seed: 1,
        quick: true,
    }
}

/// The row whose name starts with `prefix`.
fn row<'r>(r: &'r Report, prefix: &str) -> &'r Row {
    r.rows
        .iter()
        .find(|row| row.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row {prefix:?} in\n{}", r.table()))
}

/// Asserts that the rows whose names start with each prefix hold.
fn pin(r: &Report, prefixes: &[&str]) {
    for p in prefixes {
        let row = row(r, p);
        assert!(
            row.holds,
            "{p}: {} vs claim {:?}\n{}",
            row.inagg,
            row.claim,
            r.table()
        );
    }
}

/// Pins a row's direction where its claim (the paper's rough size) fails:
/// the figure must stay above `floor`.
fn pin_above(r: &Report, prefix: &str, floor: f64) {
    let row = row(r, prefix);
    assert!(
        row.inagg > floor,
        "{prefix}: {} not above {floor}\n{}",
        row.inagg,
        r.table()
    );
}

#[test]
fn selective_reduce_beats_partial_reduce() {
    let r = reproduce("selective-reduce", &quick()).expect("known");
    pin(
        &r,
        &[
            "sync time, partial / selective (lowest)",
            "sync time, partial / selective (highest)",
            "sync scale, selective / partial (lowest)",
            "partial sync time, n=200",
            "sensitivity: sync scale, p/n",
            "sensitivity: sync scale, eta",
            "sensitivity: sync-time gain, lambda",
            "sensitivity: sync time, partial / selective, e 0.5",
            "sensitivity: sync time added by alpha 50 ms, selective / all-reduce",
        ],
    );
    // The claims' factor of two lets a gain of 1.0 pass for the paper's
    // 1.89x; partial reduce in selective reduce's place gives 1.0 here.
    pin_above(&r, "sync time, partial / selective (lowest)", 1.1);
    pin_above(&r, "sync time, partial / selective (highest)", 2.0);
    pin_above(&r, "sync scale, selective / partial (lowest)", 1.15);
    // 2 traces x 3 metrics plotted, each with the three schemes.
    assert_eq!(r.figures.len(), 6);
    assert!(r.figures.iter().all(|f| f.series.len() == 3));
    assert!(
        r.notes.is_empty(),
        "the period sweep is not in the quick run"
    );
}

/// The full run tries the period c the paper does not give, and its c = 10
/// note (inagg's c) is the table's own figure.
#[test]
fn selective_reduce_tries_the_periods_the_paper_leaves_open() {
    let r = reproduce(
        "selective-reduce",
        &Options {
            quick: false,
            ..quick()
        },
    )
    .expect("known");
    let periods: Vec<&str> = r
        .notes
        .iter()
        .filter_map(|n| n.strip_prefix("full all-reduce every c = "))
        .map(|n| n.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(periods, ["10", "20", "1000"], "{:?}", r.notes);
    let trend = row(&r, "selective sync time, n=200 / n=40").inagg;
    assert!(
        r.notes[0].ends_with(&format!("n=200 / n=40: {trend:.3}")),
        "{} vs the row's {trend}",
        r.notes[0]
    );
    assert!(r
        .table()
        .contains("\nnote: full all-reduce every c = 20 syncs"));
}

/// The cause REPRODUCTION.md gives for selective reduce's sync time not
/// rising with p / n: at p / n = 0.5 BPAWR holds the slowest workers' groups
/// (smaller than p) until the full all-reduce, so they leave the partial
/// groups' mean. Partial reduce, first come first served, leaves nobody
/// out at the same p, and neither scheme does at p / n = 0.1.
#[test]
fn a_large_p_leaves_selective_reduces_slowest_workers_to_the_full_all_reduce() {
    use inagg_sim::cost::CostModel;
    use inagg_sim::dist::{self, Compute};
    use inagg_sim::scenario::selective_reduce::{run, Scheme, Setup};
    let only_full = |p_frac: f64, scheme: Scheme| {
        let setup = Setup {
            p_frac,
            c: 1000,
            cost: CostModel::Ring { alpha: 0.0 },
            ..Setup::paper(120, Compute::TRANSFORMER)
        };
        run(&setup, scheme, &mut dist::rng(1, 0)).only_full
    };
    let selective = Scheme::Selective { cold: false };
    assert!(
        only_full(0.5, selective) > 0.2,
        "{}",
        only_full(0.5, selective)
    );
    assert_eq!(only_full(0.5, Scheme::PartialReduce), 0.0);
    assert_eq!(only_full(0.1, selective), 0.0);
}

/// Why selective reduce's sync time is flat from p / n = 0.1 to 0.3 at
/// c = 10 while it rises at c = 1000: a full all-reduce every ten syncs
/// restarts all n workers together, and at p / n = 0.1 the nine partial
/// groups between two of them hold about one sync per worker. Each group is
/// then drawn from one wave of workers that became ready together, whatever
/// their links, and its slowest link is slower than when the workers run
/// free (c = 1000), where the fast-link workers, back sooner, meet each
/// other. At p / n = 0.3 the groups are large either way and the two agree.
#[test]
fn frequent_full_all_reduces_put_slow_links_into_selective_reduces_small_groups() {
    use inagg_sim::dist::{self, Compute};
    use inagg_sim::scenario::selective_reduce::{run, Metrics, Scheme, Setup};
    let mean = |c: u64, p_frac: f64, f: fn(&Metrics) -> f64| {
        let setup = Setup {
            c,
            p_frac,
            ..Setup::paper(120, Compute::TRANSFORMER)
        };
        let runs = (0..5).map(|t| {
            run(
                &setup,
                Scheme::Selective { cold: false },
                &mut dist::rng(1, t),
            )
        });
        runs.map(|m| f(&m)).sum::<f64>() / 5.0
    };
    let slowest = |m: &Metrics| m.partial_slowest;
    let time = |m: &Metrics| m.partial_time;
    let (slow_free, slow_reset) = (mean(1000, 0.1, slowest), mean(10, 0.1, slowest));
    assert!(
        slow_reset < 0.85 * slow_free,
        "slowest link, c = 10: {slow_reset:.2}, c = 1000: {slow_free:.2} Gbit/s"
    );
    let (time_free, time_reset) = (mean(1000, 0.1, time), mean(10, 0.1, time));
    assert!(
        time_reset > 1.2 * time_free,
        "partial sync time, c = 10: {time_reset:.3}, c = 1000: {time_free:.3} s"
    );
    let ratio = mean(10, 0.3, time) / mean(1000, 0.3, time);
    assert!((0.9..1.1).contains(&ratio), "p/n 0.3: {ratio:.3}");
}

#[test]
fn selmcast_balances_receivers() {
    let r = reproduce("selmcast", &quick()).expect("known");
    pin(
        &r,
        &[
            "model completion, SELMCAST, L3",
            "model completion, Orpheus, L3",
            "max-min flow completion, SELMCAST, L3",
            "receivers, SELMCAST / Orpheus, L7",
            "round time, SELMCAST / optimal",
            "Eq. 1",
            // SSP (Algorithm 2): more compute and more receivers than
            // random choice, for each workload.
            "SSP NPU utilisation, Orpheus, LSTM",
            "SSP NPU utilisation, SELMCAST, LSTM",
            "SSP NPU utilisation, SELMCAST, Transformer",
            "SSP NPU utilisation, SELMCAST, ResNet-50",
            "SSP scale delivered, SELMCAST, LSTM",
            "SSP scale delivered, SELMCAST, Transformer",
            "SSP scale planned at admission, SELMCAST, ResNet-50",
        ],
    );
    // The claim 0.30 -> 0.55 passes Orpheus's own 0.30 within its factor
    // of two; SELMCAST must deliver well above Orpheus on every workload.
    for workload in ["LSTM", "Transformer", "ResNet-50"] {
        let orpheus = row(&r, &format!("SSP scale delivered, Orpheus, {workload}")).inagg;
        let selmcast = row(&r, &format!("SSP scale delivered, SELMCAST, {workload}")).inagg;
        assert!(
            selmcast > 1.2 * orpheus,
            "{workload}: SELMCAST delivers {selmcast}, Orpheus {orpheus}"
        );
    }
}

#[test]
fn netstorm_beats_the_star() {
    let r = reproduce("netstorm", &quick()).expect("known");
    pin(
        &r,
        &[
            "auxiliary paths on top",
            "adaptive FAPT / static balanced tree",
            "NetStorm / star at 15 DCs",
            "CHUNK_SIZE 8M / 1M",
            "UPDATE_TIME 5 s / 600 s",
            "mean iteration, aware / blind",
            "MLNet balanced tree / star",
        ],
    );
    // Three trials sit under the full run's figures; each is well clear
    // of the 1x a baseline in NetStorm's place would give, even against
    // the star's best server.
    pin_above(&r, "NetStorm / MXNet star, static", 4.0);
    pin_above(&r, "NetStorm / star served from its best DC", 3.0);
    pin_above(&r, "NetStorm / MXNet star, dynamic", 3.0);
    pin_above(&r, "single-root FAPT / star", 2.0);
    pin_above(&r, "multi-root FAPT, no awareness / star", 2.5);
    // Below the paper's size (REPRODUCTION.md says why).
    pin_above(&r, "roots 9 / roots 1", 1.1);
}

/// The numbers in a note, in order (a trailing `x` or `s` dropped).
fn numbers(note: &str) -> Vec<f64> {
    note.split([' ', ',', '(', ')', ';'])
        .filter_map(|w| w.trim_end_matches(['x', 's']).parse().ok())
        .collect()
}

/// The notes under NetStorm's table: the star at each DC in turn, where
/// the hub's figure is the table's own "best DC" row (so `Server::At`
/// puts the server where it says); and the phase load as DCs are added,
/// where the trees' busiest link grows faster than the slowest DC's own
/// links (the cause REPRODUCTION.md gives for the scaling gap).
#[test]
fn netstorm_notes_the_star_at_each_dc_and_the_busiest_link() {
    let r = reproduce("netstorm", &quick()).expect("known");
    let servers = r
        .notes
        .iter()
        .find(|n| n.starts_with("NetStorm / star served from DC"))
        .unwrap_or_else(|| panic!("{:?}", r.notes));
    let hub = servers
        .split(", ")
        .find_map(|s| s.split_once(" (hub) "))
        .map(|(_, x)| x.trim_end_matches('x'))
        .unwrap_or_else(|| panic!("{servers}"));
    let best = row(&r, "NetStorm / star served from its best DC").inagg;
    assert_eq!(hub, format!("{best:.2}"), "{servers}");
    assert_eq!(servers.matches("x").count(), 9, "{servers}");
    let loads: Vec<Vec<f64>> = r
        .notes
        .iter()
        .filter(|n| n.contains("DCs, per phase"))
        .map(|n| numbers(n))
        .collect();
    // [DCs, busiest link s, its share, slowest DC s, iteration s].
    assert_eq!(loads.len(), 3, "{:?}", r.notes);
    let (first, last) = (&loads[0], &loads[2]);
    assert_eq!((first[0], last[0]), (5.0, 15.0), "{loads:?}");
    assert!(first.iter().chain(last).all(|x| *x > 0.0), "{loads:?}");
    let link_growth = last[1] / first[1];
    let dc_growth = last[3] / first[3];
    assert!(link_growth > 2.0 && link_growth > dc_growth, "{loads:?}");
    // Two phases on the busiest link are near a whole iteration.
    assert!(2.0 * last[1] > 0.5 * last[4], "{loads:?}");
}

#[test]
fn priority_orders_help_over_ina() {
    let r = reproduce("priority", &quick()).expect("known");
    pin(
        &r,
        &[
            "ByteScheduler / P3",
            "Geryon / FIFO",
            "P3 / FIFO at RTT 0 (ordering alone), 30",
            "P3 / FIFO at RTT 0 (ordering alone), 15",
        ],
    );
}

/// The compute stand-in scaled by 1 to 3: at x1 the note is the table's
/// own RTT-0 figure (the scale is applied, and only there), and once the
/// compute is large enough for back-propagation to hide all of VGG-19's
/// traffic at 30 Gbit/s, no order gains anything.
#[test]
fn priority_tries_more_compute() {
    let r = reproduce("priority", &quick()).expect("known");
    let scales: Vec<&str> = r
        .notes
        .iter()
        .filter_map(|n| n.strip_prefix("compute x")?.split(' ').next())
        .collect();
    assert_eq!(scales, ["1", "1.5", "2", "2.5", "3"], "{:?}", r.notes);
    let gain_30 = |note: &str| -> f64 {
        let (_, rest) = note.split_once("P3 / FIFO ").expect("gain");
        rest.split(' ').next().unwrap().parse().unwrap()
    };
    let at_1 = row(&r, "P3 / FIFO at RTT 0 (ordering alone), 30").inagg;
    assert_eq!(format!("{:.3}", gain_30(&r.notes[0])), format!("{at_1:.3}"));
    assert!(at_1 > 1.1, "{at_1}");
    assert!((gain_30(&r.notes[4]) - 1.0).abs() < 0.01, "{}", r.notes[4]);
}

#[test]
fn dsyncps_membership_never_stalls() {
    let r = reproduce("dsyncps", &quick()).expect("known");
    pin(
        &r,
        &[
            "global syncs in 30 rounds",
            "servers in the table",
            "workers per server",
        ],
    );
}

#[test]
fn same_seed_same_figures() {
    let a = reproduce("netstorm", &quick()).expect("known");
    let b = reproduce("netstorm", &quick()).expect("known");
    let values = |r: &Report| {
        r.rows
            .iter()
            .map(|row| row.inagg.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(values(&a), values(&b));
    assert!(reproduce("nope", &quick()).is_none());
}

/// The SSP sweeps (Figs. 9, 12, 13) on short runs: the directions the
/// paper's figures show, each of which a swapped policy would break.
#[test]
fn selmcast_ssp_sweeps_keep_their_directions() {
    use inagg_sim::scenario::selmcast_ssp::{medians, Scheme, Setup, WORKLOADS};
    let base = Setup {
        horizon: 60.0,
        ..Setup::paper(WORKLOADS[1])
    };
    let m = |setup: Setup, scheme| medians(&setup, scheme, 2, 1);
    // Fig. 13: with rates redrawn every 100 ms, SELMCAST still delivers to
    // more receivers than Orpheus.
    let varied = Setup { gamma: 1.0, ..base };
    let (sel, orp) = (m(varied, Scheme::Selmcast), m(varied, Scheme::Orpheus));
    assert!(sel.scale > orp.scale, "gamma 1: {sel:?} vs {orp:?}");
    // And the variability is real: the same seed gives other figures.
    assert_ne!(
        m(base, Scheme::Selmcast).utilisation,
        sel.utilisation,
        "gamma changed nothing"
    );
    // Fig. 12: sixteen times the volume costs utilisation and scale.
    let small = m(
        Setup {
            volume: base.volume / 16.0,
            ..base
        },
        Scheme::Selmcast,
    );
    let large = m(
        Setup {
            volume: base.volume * 16.0,
            ..base
        },
        Scheme::Selmcast,
    );
    assert!(
        large.utilisation < small.utilisation / 2.0,
        "{small:?} vs {large:?}"
    );
    assert!(large.scale < small.scale, "{small:?} vs {large:?}");
    // Fig. 9: relaxing k from 1 to 16 lowers Orpheus's scale.
    let strict = m(Setup { k: 1, ..base }, Scheme::Orpheus);
    let loose = m(Setup { k: 16, ..base }, Scheme::Orpheus);
    assert!(loose.scale < strict.scale, "{strict:?} vs {loose:?}");
}
