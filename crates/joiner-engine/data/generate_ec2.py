#!/usr/bin/env python3
"""Regenerates ec2-catalog.json, the every-type EC2 catalog Joiner embeds.

Usage: generate_ec2.py [SHARED_DATA_DIR [MOTO_INSTANCE_TYPES]] > ec2-catalog.json
SHARED_DATA_DIR defaults to /work/shared/data and must hold aws-ec2-catalog.json (EC2's
DescribeInstanceTypes and DescribeInstanceTypeOfferings as moto records them, with Karpenter's
us-east-1 on-demand price table; see README.md). MOTO_INSTANCE_TYPES is moto 5.2.1's own record
of DescribeInstanceTypes (moto/ec2/resources/instance_types.json.gz; by default, that of the
installed moto), the same source, read for the two facts the shared file leaves out: the
placement group strategies and the nested-virtualization support of each type. Joiner never
reads either file at run time: only the output of this script is compiled in
(src/catalog/ec2.rs).

The output keeps the facts a scheduler needs and nothing else, one type per line, and groups
each region's offerings by the set of zones a type is offered in (zone names are the region
plus a letter), which keeps the file small.
"""
import gzip
import json
import os
import sys
from collections import defaultdict

src = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/data"
with open(f"{src}/aws-ec2-catalog.json") as f:
    doc = json.load(f)


def moto_instance_types():
    if len(sys.argv) > 2:
        path = sys.argv[2]
    else:
        import moto
        if moto.__version__ != "5.2.1":
            sys.exit(f"moto {moto.__version__} installed; the data is moto 5.2.1's")
        path = os.path.join(os.path.dirname(moto.__file__), "ec2/resources/instance_types.json.gz")
    with gzip.open(path) as f:
        return json.load(f)


described = moto_instance_types()
ALL_STRATEGIES = ["cluster", "partition", "spread"]


def described_extras(name):
    """The placement strategies (listed only when not all three) and nested virtualization
    (only when supported) of a type, from moto's DescribeInstanceTypes record."""
    info = described.get(name)
    if info is None:
        sys.exit(f"{name}: not in moto's DescribeInstanceTypes record")
    out = {}
    strategies = sorted((info.get("PlacementGroupInfo") or {}).get("SupportedStrategies", []))
    if strategies != ALL_STRATEGIES:
        out["placementStrategies"] = strategies
    features = (info.get("ProcessorInfo") or {}).get("SupportedFeatures", [])
    if "nested-virtualization" in features:
        out["nestedVirtualization"] = True
    return out


def card0(t):
    cards = [c for c in t["networkCards"] if c["index"] == 0]
    if len(cards) != 1:
        sys.exit(f"expected one network card 0, got {cards}")
    return cards[0]


def bandwidth_mbps(t):
    # The instance's baseline is the card's only when there is one card: multi-card types do
    # not add up (g6e.24xlarge has two 200 Gbps cards and a 200 Gbps baseline).
    if len(t["networkCards"]) != 1:
        return None
    return round(t["networkCards"][0]["baselineBandwidthGbps"] * 1000)


def accelerators(t):
    acc = t.get("accelerators") or {}
    out = []
    for a in acc.get("Accelerators", []):
        out.append({"kind": "inference", "manufacturer": a["Manufacturer"], "name": a["Name"],
                    "count": a["Count"]})
    for a in acc.get("NeuronDevices", []):
        out.append({"kind": "neuron", "manufacturer": "AWS", "name": a["Name"], "count": a["Count"],
                    "cores": a["CoreInfo"]["Count"]})
    return out


types = []
for name in sorted(doc["instanceTypes"]):
    t = doc["instanceTypes"][name]
    storage = t.get("instanceStorage")
    entry = {
        "name": name,
        "arch": t["architectures"],
        "cpuManufacturer": t["manufacturer"],
        "vcpu": t["vcpu"],
        "memoryMiB": t["memoryMiB"],
        "hypervisor": t["hypervisor"],
        "enis": card0(t)["maximumNetworkInterfaces"],
        "ipv4PerEni": t["ipv4AddressesPerInterface"],
        "bandwidthMbps": bandwidth_mbps(t),
        "efa": t["efaMaximumInterfaces"],
        # Interfaces per network card, by card index, where there is more than one card: what
        # an EC2NodeClass's `networkInterfaces` may use.
        **({"cards": [c["maximumNetworkInterfaces"]
                      for c in sorted(t["networkCards"], key=lambda c: c["index"])]}
           if len(t["networkCards"]) > 1 else {}),
        "encryptionInTransit": t["encryptionInTransit"],
        "usage": t["usageClasses"],
        **described_extras(name),
    }
    if t.get("gpus"):
        entry["gpus"] = [{k: g[k] for k in ("manufacturer", "name", "count", "memoryMiB")}
                         for g in t["gpus"]]
    if accelerators(t):
        entry["accelerators"] = accelerators(t)
    if storage:
        entry["storage"] = {"totalGB": storage["totalSizeGB"], "nvme": storage["nvme"]}
    price = (t.get("onDemandPricePerHour") or {}).get("us-east-1")
    if price is not None:
        entry["onDemandUsd"] = price
    types.append(entry)

offerings = {}
for region in sorted(doc["offerings"]):
    groups = defaultdict(list)
    for name, zones in sorted(doc["offerings"][region].items()):
        letters = []
        for z in sorted(zones):
            if not (z.startswith(region) and len(z) == len(region) + 1):
                sys.exit(f"{region}: zone {z} is not the region and a letter")
            letters.append(z[-1])
        groups["".join(letters)].append(name)
    offerings[region] = dict(sorted(groups.items()))

note = ("Generated by generate_ec2.py from aws-ec2-catalog.json (README.md names its sources); "
        "do not edit by hand.")
lines = [json.dumps(o, separators=(",", ":")) for o in types]
regions = [json.dumps(r) + ":" + json.dumps(g, separators=(",", ":")) for r, g in offerings.items()]
print('{\n "note": ' + json.dumps(note) + ',\n "priceRegion": "us-east-1",\n "types": [\n  '
      + ",\n  ".join(lines) + '\n ],\n "offerings": {\n  ' + ",\n  ".join(regions) + "\n }\n}")
