//! The cloud's instance types as one step reads them, indexed by name: each NodeClaim a step
//! launches asks for the offerings of the dozens of types it allows among the hundreds sold,
//! and a step may launch thousands.

use std::collections::HashMap;

use super::CloudInstanceType;

/// Instance types and their offerings, by name. The cloud lists each type once (EC2's
/// DescribeInstanceTypes does); were a name listed twice, the first would answer for it.
#[derive(Debug, Default)]
pub struct SoldTypes {
    types: Vec<CloudInstanceType>,
    by_name: HashMap<String, usize>,
}

impl SoldTypes {
    pub fn new(types: Vec<CloudInstanceType>) -> Self {
        let mut by_name = HashMap::with_capacity(types.len());
        for (i, t) in types.iter().enumerate() {
            by_name.entry(t.name.clone()).or_insert(i);
        }
        SoldTypes { types, by_name }
    }

    /// Every type, in the cloud's order.
    pub fn all(&self) -> &[CloudInstanceType] {
        &self.types
    }

    /// The type with this name, if the cloud sells it.
    pub fn named(&self, name: &str) -> Option<&CloudInstanceType> {
        self.by_name.get(name).map(|&i| &self.types[i])
    }
}
