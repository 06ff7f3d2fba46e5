//! On-demand prices from the Price List API, which moto does not serve: a stub on loopback
//! answers `GetProducts` as AWS does (JSON 1.1, price documents as strings, `NextToken`
//! paging), and can refuse as AWS does without `pricing:GetProducts`. EC2 is moto's.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use common::{CLUSTER, Env, settings};
use joiner_aws::AwsCloud;
use joiner_controller::cloud::CloudProvider;
use joiner_engine::catalog::CapacityType;
use serde_json::{Value, json};

/// What the stub answers.
#[derive(Clone, Copy)]
enum Answer {
    /// Two pages of price documents.
    Prices,
    /// `AccessDeniedException`, as for a role without `pricing:GetProducts`.
    Denied,
}

fn document(instance_type: &str, usd: &str) -> String {
    json!({
        "product": {"productFamily": "Compute Instance",
                    "attributes": {"instanceType": instance_type, "regionCode": "us-east-1",
                                   "operatingSystem": "Linux", "tenancy": "Shared"}},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {"X.JRTCKXETXF": {"priceDimensions": {"X.JRTCKXETXF.6YS6EN2CT7": {
            "unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}
    })
    .to_string()
}

/// Serves `GetProducts` on a loopback port; returns its URL and the request bodies it got.
fn stub(answer: Answer) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            record.lock().expect("lock").push(request.clone());
            let (status, reply) = match answer {
                Answer::Denied => (
                    "400 Bad Request",
                    json!({"__type": "AccessDeniedException", "message": "not authorized to perform pricing:GetProducts"}),
                ),
                Answer::Prices if request.get("NextToken").is_none() => (
                    "200 OK",
                    json!({"FormatVersion": "aws_v1", "NextToken": "page-2",
                           "PriceList": [document("g4dn.xlarge", "0.4100000000"), "{broken".to_string()]}),
                ),
                Answer::Prices => (
                    "200 OK",
                    json!({"FormatVersion": "aws_v1",
                           "PriceList": [document("g5.xlarge", "0.9900000000")]}),
                ),
            };
            let reply = reply.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (url, seen)
}

fn cloud_with_prices(env: &Env, url: &str) -> AwsCloud {
    env.rt
        .block_on(AwsCloud::from_sdk_config(
            &env.sdk,
            &settings(),
            CLUSTER,
            env.rt.handle().clone(),
        ))
        .expect("AwsCloud")
        .with_pricing_endpoint(&env.sdk, url)
}

fn on_demand_usd(cloud: &AwsCloud, instance_type: &str) -> Vec<f64> {
    cloud
        .instance_types()
        .expect("instance types")
        .into_iter()
        .filter(|t| t.name == instance_type)
        .flat_map(|t| t.offerings)
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| o.price.as_usd())
        .collect()
}

#[test]
fn on_demand_prices_come_from_the_price_list_for_the_region_across_pages() {
    let Some(env) = Env::start() else { return };
    let (url, seen) = stub(Answer::Prices);
    let cloud = cloud_with_prices(&env, &url);
    let g4 = on_demand_usd(&cloud, "g4dn.xlarge");
    assert!(!g4.is_empty() && g4.iter().all(|p| *p == 0.41), "{g4:?}");
    let g5 = on_demand_usd(&cloud, "g5.xlarge");
    assert!(
        !g5.is_empty() && g5.iter().all(|p| *p == 0.99),
        "the second page: {g5:?}"
    );
    // A type the list does not price keeps the built-in price.
    let m5 = on_demand_usd(&cloud, "m5.large");
    assert!(!m5.is_empty() && m5.iter().all(|p| *p == 0.096), "{m5:?}");

    let requests = seen.lock().expect("lock").clone();
    assert_eq!(requests.len(), 2, "two pages: {requests:?}");
    assert_eq!(requests[0]["ServiceCode"], "AmazonEC2");
    assert_eq!(requests[1]["NextToken"], "page-2");
    let filters: Vec<(String, String)> = requests[0]["Filters"]
        .as_array()
        .expect("filters")
        .iter()
        .map(|f| {
            assert_eq!(f["Type"], "TERM_MATCH");
            (
                f["Field"].as_str().unwrap_or_default().to_string(),
                f["Value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for want in [
        ("regionCode", "us-east-1"),
        ("operatingSystem", "Linux"),
        ("tenancy", "Shared"),
        ("capacitystatus", "Used"),
    ] {
        assert!(
            filters.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {filters:?}"
        );
    }
}

#[test]
fn a_price_list_that_refuses_leaves_the_built_in_prices() {
    let Some(env) = Env::start() else { return };
    let (url, seen) = stub(Answer::Denied);
    let cloud = cloud_with_prices(&env, &url);
    let g4 = on_demand_usd(&cloud, "g4dn.xlarge");
    assert!(!g4.is_empty() && g4.iter().all(|p| *p == 0.526), "{g4:?}");
    assert_eq!(seen.lock().expect("lock").len(), 1, "refused, not retried");
}
