//! Checks NodePools, NodeClaims and EC2NodeClasses against the chart's CRDs, offline, the way the
//! API server would (schema, enums, patterns, CEL rules), naming each failing field:
//!
//! ```sh
//! cargo run -p joiner-chart --example validate -- nodepool.yaml [more.yaml ...]
//! ```
//!
//! Exit status 0 when every object is valid, 1 otherwise. Other kinds are skipped.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

fn main() -> ExitCode {
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/joiner/crds");
    let mut schemas = Vec::new();
    for file in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
    ] {
        let crd: Value = match std::fs::read_to_string(crds.join(file))
            .map_err(|e| e.to_string())
            .and_then(|t| serde_saphyr::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(crd) => crd,
            Err(e) => {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let group = crd["spec"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
        schemas.push((format!("{group}/v1"), kind, schema));
    }
    let mut failed = false;
    for path in std::env::args().skip(1) {
        let docs: Vec<Value> = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_saphyr::from_multiple(&t).map_err(|e| e.to_string()))
        {
            Ok(docs) => docs,
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
                continue;
            }
        };
        for doc in docs.iter().filter(|d| !d.is_null()) {
            let Some((_, kind, schema)) = schemas.iter().find(|(av, kind, _)| {
                doc["apiVersion"] == av.as_str() && doc["kind"] == kind.as_str()
            }) else {
                continue;
            };
            let name = doc["metadata"]["name"].as_str().unwrap_or("<unnamed>");
            let errors = joiner_chart::validate(schema, doc);
            if errors.is_empty() {
                println!("{path}: {kind}/{name}: valid");
            }
            for e in errors {
                failed = true;
                println!("{path}: {kind}/{name}: {e}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
