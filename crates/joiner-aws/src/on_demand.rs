//! On-demand prices for the configured region from the AWS Price List API (`GetProducts`).
//!
//! The API lives in a few regions only (us-east-1 for the commercial partition, cn-northwest-1
//! for China), whatever the cluster's region; its answer is one JSON document per product. Only
//! what the nodes Joiner launches are billed at is asked for: Linux, shared tenancy, no
//! pre-installed software, no licence, instances actually running (`capacitystatus=Used`).
//!
//! A document that cannot be read is skipped with a warning naming it; one bad entry never
//! costs the others their price. A failed call (no `pricing:GetProducts` permission, a
//! partition without the API, throttling past the retries) is the caller's to fall back on.

use std::collections::BTreeMap;

use aws_sdk_pricing::types::{Filter, FilterType};
use joiner_model::Price;
use serde::Deserialize;

use crate::clients::Clients;
use crate::error::AwsError;

/// One product document: just what a price needs.
#[derive(Debug, Deserialize)]
struct Product {
    product: ProductInfo,
    terms: Terms,
}

#[derive(Debug, Deserialize)]
struct ProductInfo {
    attributes: Attributes,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Attributes {
    instance_type: String,
}

#[derive(Debug, Deserialize)]
struct Terms {
    #[serde(rename = "OnDemand", default)]
    on_demand: BTreeMap<String, Term>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Term {
    price_dimensions: BTreeMap<String, Dimension>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dimension {
    price_per_unit: BTreeMap<String, String>,
}

/// The hourly on-demand price a document gives its instance type, or why it gives none.
pub(crate) fn price_of(document: &str) -> Result<(String, Price), String> {
    let p: Product = serde_json::from_str(document).map_err(|e| e.to_string())?;
    let usd = p
        .terms
        .on_demand
        .values()
        .flat_map(|t| t.price_dimensions.values())
        .find_map(|d| d.price_per_unit.get("USD"))
        .ok_or("no OnDemand USD price")?;
    let price = usd
        .parse::<f64>()
        .ok()
        .and_then(Price::from_usd)
        .ok_or_else(|| format!("price {usd:?} is not a number of dollars"))?;
    Ok((p.product.attributes.instance_type, price))
}

/// Every type's price from the documents, skipping (with a warning) those that cannot be read.
/// A price of zero is not a price (EC2 lists reserved and unused-capacity SKUs at zero), and the
/// first price of a type wins over later duplicates.
pub(crate) fn prices_of<'a>(
    documents: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, Price> {
    let mut prices = BTreeMap::new();
    for (i, doc) in documents.into_iter().enumerate() {
        match price_of(doc) {
            Ok((_, price)) if price == Price::ZERO => {}
            Ok((instance_type, price)) => {
                prices.entry(instance_type).or_insert(price);
            }
            Err(e) => {
                let start: String = doc.chars().take(80).collect();
                tracing::warn!(entry = i, error = %e, document = %start, "price list entry skipped");
            }
        }
    }
    prices
}

fn term(field: &str, value: &str) -> Option<Filter> {
    Filter::builder()
        .r#type(FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()
        .ok()
}

impl Clients {
    /// The on-demand Linux price of every instance type in `region`, by type.
    pub(crate) async fn on_demand_prices(
        &self,
        region: &str,
    ) -> Result<BTreeMap<String, Price>, AwsError> {
        let filters: Vec<Filter> = [
            ("regionCode", region),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("licenseModel", "No License required"),
            ("capacitystatus", "Used"),
        ]
        .into_iter()
        .filter_map(|(f, v)| term(f, v))
        .collect();
        let mut documents = Vec::new();
        let mut pages = self
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .format_version("aws_v1")
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page
                .map_err(|e| AwsError::api("GetProducts", format!("AmazonEC2 in {region}"), e))?;
            documents.extend(page.price_list().iter().cloned());
        }
        Ok(prices_of(documents.iter().map(String::as_str)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn document(instance_type: &str, usd: &str) -> String {
        serde_json::json!({
            "product": {"productFamily": "Compute Instance", "sku": "ABC",
                        "attributes": {"instanceType": instance_type, "regionCode": "eu-west-1",
                                       "operatingSystem": "Linux", "tenancy": "Shared"}},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"ABC.JRTCKXETXF": {"priceDimensions": {"ABC.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "pricePerUnit": {"USD": usd}, "description": "per hour"}},
                "sku": "ABC", "effectiveDate": "2026-11-01T00:00:00Z"}}},
            "version": "20261101000000", "publicationDate": "2026-11-01T00:00:00Z"
        })
        .to_string()
    }

    #[test]
    fn each_document_gives_its_type_an_hourly_price_and_bad_ones_are_skipped() {
        let docs = [
            document("g4dn.xlarge", "0.5870000000"),
            "{not json".to_string(),
            r#"{"product": {"attributes": {"instanceType": "m5.large"}}, "terms": {}}"#.to_string(),
            document("m5.large", "0.1070000000"),
            document("m5.large", "0.2000000000"),
            document("c5.large", "0.0000000000"),
            document("p5.48xlarge", "lots"),
        ];
        let prices = prices_of(docs.iter().map(String::as_str));
        let usd = |t: &str| prices.get(t).map(|p| p.as_usd());
        assert_eq!(usd("g4dn.xlarge"), Some(0.587));
        assert_eq!(usd("m5.large"), Some(0.107), "the first price wins");
        assert_eq!(usd("c5.large"), None, "zero is no price");
        assert_eq!(usd("p5.48xlarge"), None);
        assert_eq!(prices.len(), 2);
    }
}
