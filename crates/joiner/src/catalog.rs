//! Printing `joiner catalog`: the instance types each NodePool allows ([`Listing`], built by
//! the engine), as a table for people or JSON for programs.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use joiner_engine::listing::{ListedType, Listing};
use joiner_model::wellknown::resources;

use crate::output::columns;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per instance type and NodePool.
    Table,
    /// The table plus ephemeral storage and every offering.
    Wide,
    Json,
}

pub fn render(listing: &Listing, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(listing)? + "\n",
        Format::Table => table(listing, false),
        Format::Wide => table(listing, true),
    })
}

fn table(listing: &Listing, wide: bool) -> String {
    let mut header = vec![
        "NODEPOOL",
        "INSTANCE-TYPE",
        "CPU",
        "MEMORY",
        "PODS",
        "GPU",
        "EFA",
        "DRA",
        "OFFERINGS",
        "PRICE/H",
    ];
    if wide {
        header.extend(["EPHEMERAL", "ZONES"]);
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    let mut notes = BTreeSet::new();
    for pool in &listing.node_pools {
        for t in &pool.instance_types {
            if let Some(note) = &t.price_note {
                notes.insert(note.clone());
            }
            rows.push(row(&pool.node_pool, t, wide));
        }
    }
    let mut out = columns(&rows);
    for note in notes {
        let _ = writeln!(out, "* {note}");
    }
    let counts: Vec<String> = listing
        .node_pools
        .iter()
        .map(|p| format!("{} {}", p.node_pool, p.instance_types.len()))
        .collect();
    let _ = writeln!(
        out,
        "\nInstance types per NodePool in {}: {}",
        listing.region,
        counts.join(", ")
    );
    out
}

fn row(pool: &str, t: &ListedType, wide: bool) -> Vec<String> {
    let get = |name: &str| {
        t.allocatable
            .get(name)
            .map_or_else(|| "-".to_string(), ToString::to_string)
    };
    let gpu = t.gpu.as_ref().map_or_else(
        || "-".to_string(),
        |g| {
            let served = g.served_by.join("+");
            // A GPU resource pods see after sharing (time-slicing replicas), where one is, and
            // the MIG instances a NodePool's nvidia.com/mig.config makes.
            let mut advertised = [resources::NVIDIA_GPU, "nvidia.com/gpu.shared"]
                .iter()
                .find_map(|r| t.allocatable.get(*r).map(|q| format!(" {r}={q}")))
                .unwrap_or_default();
            for (r, q) in t
                .allocatable
                .iter()
                .filter(|(r, _)| r.starts_with("nvidia.com/mig-"))
            {
                advertised.push_str(&format!(" {r}={q}"));
            }
            format!("{} x {} ({served}){advertised}", g.count, g.name)
        },
    );
    let dra = if t.dra_devices.is_empty() {
        "-".to_string()
    } else {
        t.dra_devices
            .iter()
            .map(|(driver, n)| format!("{driver}={n}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let zones: BTreeSet<&str> = t.offerings.iter().map(|o| o.zone.as_str()).collect();
    let capacity_types: BTreeSet<&str> = t
        .offerings
        .iter()
        .map(|o| o.capacity_type.as_str())
        .collect();
    let offerings = if zones.is_empty() {
        "none in these zones".to_string()
    } else {
        format!(
            "{} zone(s) x {}",
            zones.len(),
            capacity_types.into_iter().collect::<Vec<_>>().join(",")
        )
    };
    let price = match (&t.price_per_hour, &t.price_note) {
        (Some(p), None) => p.to_string(),
        (Some(p), Some(_)) => format!("{p}*"),
        (None, _) => "unknown".to_string(),
    };
    let mut row = vec![
        pool.to_string(),
        t.name.clone(),
        get(resources::CPU),
        get(resources::MEMORY),
        get(resources::PODS),
        gpu,
        t.efa.to_string(),
        dra,
        offerings,
        price,
    ];
    if wide {
        row.push(get(resources::EPHEMERAL_STORAGE));
        row.push(
            t.offerings
                .iter()
                .map(|o| {
                    let price = if o.available {
                        o.price_per_hour.to_string()
                    } else {
                        "unavailable".to_string()
                    };
                    format!("{}/{}={price}", o.zone, o.capacity_type)
                })
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    row
}
