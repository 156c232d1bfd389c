//! What every runtime's metrics share: its names found at drains and its
//! processes by state.

use std::collections::BTreeMap;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::NameStats;
use crate::shared::metrics::{MissLabel, advance, gauge_value};

/// Advances a runtime's names family by the drains since `prev`:
/// `reason="named"`, `missed` for the frames whose code or record was
/// gone, `unreadable` for those a read of the process failed to name.
pub fn advance_names(
    family: &Family<MissLabel, Counter>,
    now: &NameStats,
    prev: &NameStats,
    missed: &'static str,
) {
    for (reason, n, p) in [
        ("named", now.named, prev.named),
        (missed, now.evicted, prev.evicted),
        ("unreadable", now.unreadable, prev.unreadable),
    ] {
        advance(&family.get_or_create(&MissLabel::new(reason)), n, p);
    }
}

/// Sets a runtime's processes family to `processes` (state: count),
/// dropping states no process is in any more.
pub fn set_processes(family: &Family<MissLabel, Gauge>, processes: &BTreeMap<&'static str, u64>) {
    family.clear();
    for (state, n) in processes {
        family
            .get_or_create(&MissLabel::new(state))
            .set(gauge_value(*n));
    }
}
