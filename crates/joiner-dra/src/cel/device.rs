//! The `device` variable of DRA selectors, converted once per device.
//!
//! Kubernetes exposes `device.driver`, `device.attributes`, `device.capacity` and
//! `device.allowMultipleAllocations`. `attributes` and `capacity` are maps from a domain
//! (`gpu.nvidia.com`) to maps from a name to a typed value; names published without a domain
//! belong to the driver's domain. An unknown domain is an *empty map*, not an error, so that
//! `"x" in device.attributes["other.example.com"]` is `false`; the `cel` crate's maps would
//! fail that lookup, hence the small map types here.

use super::quantity::CelQuantity;
use super::semver::Semver;
use cel::ExecutionError;
use cel::common::traits::{Container, Indexer};
use cel::common::types::{CelBool, CelInt, CelList, CelString, Kind, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use joiner_model::Quantity;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

static DEVICE_TYPE: Type = Type::simple_type(Kind::Opaque, "dra.Device");
static NAMES_TYPE: Type = Type::simple_type(Kind::Opaque, "dra.Names");
static DOMAINS_TYPE: Type = Type::simple_type(Kind::Opaque, "dra.Domains");

/// Splits `domain/name` or qualifies a bare `name` with the driver's domain.
pub fn qualify<'a>(driver: &'a str, name: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

fn key_str(idx: &dyn Val) -> Result<&str, ExecutionError> {
    idx.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: idx.get_type().name().to_owned(),
            want: "string".to_owned(),
        })
}

/// The `Val` plumbing shared by the map-like values of the `device` variable: each is its own
/// CEL type, indexable by string, and answers `in`.
macro_rules! map_like_val {
    ($name:ident, $ty:ident) => {
        impl Val for $name {
            fn get_type(&self) -> &Type {
                &$ty
            }
            fn cel_type() -> &'static Type {
                &$ty
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
            fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }
            fn as_container(&self) -> Option<&dyn Container> {
                Some(self)
            }
        }
        impl StaticVal for $name {}
    };
}

/// The names of one domain and their values.
#[derive(Debug, Clone, Default)]
pub struct Names(Arc<HashMap<String, Box<dyn Val>>>);

map_like_val!(Names, NAMES_TYPE);

impl Indexer for Names {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = key_str(idx)?;
        match self.0.get(key) {
            Some(v) => Ok(CowVal::Borrowed(&**v)),
            None => Err(ExecutionError::no_such_key(key)),
        }
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = key_str(idx)?;
        match self.0.get(key) {
            Some(v) => Ok(v.clone_as_boxed()),
            None => Err(ExecutionError::no_such_key(key)),
        }
    }
}

impl Container for Names {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(self.0.contains_key(key_str(value)?))
    }
}

/// Domain → names; an unknown domain gives an empty [`Names`].
#[derive(Debug, Clone, Default)]
pub struct Domains {
    known: Arc<HashMap<String, Names>>,
    empty: Names,
}

map_like_val!(Domains, DOMAINS_TYPE);

impl Indexer for Domains {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = key_str(idx)?;
        Ok(CowVal::Borrowed(self.known.get(key).unwrap_or(&self.empty)))
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = key_str(idx)?;
        Ok(Box::new(self.known.get(key).cloned().unwrap_or_default()))
    }
}

impl Container for Domains {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(self.known.contains_key(key_str(value)?))
    }
}

/// One device as the CEL `device` variable sees it.
#[derive(Debug, Clone)]
pub struct CelDevice {
    driver: Box<dyn Val>,
    attributes: Domains,
    capacity: Domains,
    allow_multiple_allocations: Box<dyn Val>,
}

impl Val for CelDevice {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }
    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}
impl StaticVal for CelDevice {}

impl CelDevice {
    fn field(&self, key: &str) -> Result<&(dyn Val + 'static), ExecutionError> {
        match key {
            "driver" => Ok(&*self.driver),
            "attributes" => Ok(&self.attributes),
            "capacity" => Ok(&self.capacity),
            "allowMultipleAllocations" => Ok(&*self.allow_multiple_allocations),
            other => Err(ExecutionError::no_such_key(other)),
        }
    }

    /// Converts a device of `driver`. Version attributes that do not parse as semver are left
    /// out (the API server rejects them; a selector touching one fails with a missing key).
    pub fn new(driver: &str, device: &Device) -> CelDevice {
        let mut attributes: HashMap<String, HashMap<String, Box<dyn Val>>> = HashMap::new();
        for (name, attr) in device.attributes.iter().flatten() {
            let (domain, id) = qualify(driver, name);
            let value: Option<Box<dyn Val>> = if let Some(i) = attr.int {
                Some(Box::new(CelInt::from(i)))
            } else if let Some(b) = attr.bool {
                Some(Box::new(CelBool::from(b)))
            } else if let Some(s) = &attr.string {
                Some(Box::new(CelString::from(s.clone())))
            } else if let Some(v) = &attr.version {
                Semver::parse(v).ok().map(|v| Box::new(v) as Box<dyn Val>)
            } else {
                list_value(attr)
            };
            if let Some(value) = value {
                attributes
                    .entry(domain.to_string())
                    .or_default()
                    .insert(id.to_string(), value);
            }
        }
        let mut capacity: HashMap<String, HashMap<String, Box<dyn Val>>> = HashMap::new();
        for (name, cap) in device.capacity.iter().flatten() {
            let (domain, id) = qualify(driver, name);
            if let Ok(q) = Quantity::try_from(&cap.value) {
                capacity
                    .entry(domain.to_string())
                    .or_default()
                    .insert(id.to_string(), Box::new(CelQuantity(q)));
            }
        }
        let domains = |m: HashMap<String, HashMap<String, Box<dyn Val>>>| Domains {
            known: Arc::new(
                m.into_iter()
                    .map(|(k, v)| (k, Names(Arc::new(v))))
                    .collect(),
            ),
            empty: Names::default(),
        };
        CelDevice {
            driver: Box::new(CelString::from(driver.to_string())),
            attributes: domains(attributes),
            capacity: domains(capacity),
            allow_multiple_allocations: Box::new(CelBool::from(
                device.allow_multiple_allocations.unwrap_or(false),
            )),
        }
    }
}

impl Indexer for CelDevice {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = key_str(idx)?;
        self.field(key).map(CowVal::Borrowed)
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = key_str(idx)?;
        self.field(key).map(|v| v.clone_as_boxed())
    }
}

/// A list-typed attribute as a CEL list of its element type (`DRAListTypeAttributes`); `None`
/// for an empty list, or versions of which one does not parse.
fn list_value(attr: &DeviceAttribute) -> Option<Box<dyn Val>> {
    let items: Vec<Box<dyn Val>> = if let Some(items) = &attr.ints {
        items
            .iter()
            .map(|i| Box::new(CelInt::from(*i)) as Box<dyn Val>)
            .collect()
    } else if let Some(items) = &attr.bools {
        items
            .iter()
            .map(|b| Box::new(CelBool::from(*b)) as Box<dyn Val>)
            .collect()
    } else if let Some(items) = &attr.strings {
        items
            .iter()
            .map(|s| Box::new(CelString::from(s.clone())) as Box<dyn Val>)
            .collect()
    } else if let Some(items) = &attr.versions {
        items
            .iter()
            .map(|v| Semver::parse(v).ok().map(|v| Box::new(v) as Box<dyn Val>))
            .collect::<Option<_>>()?
    } else {
        return None;
    };
    (!items.is_empty()).then(|| Box::new(CelList::from(items)) as Box<dyn Val>)
}

/// Serves one device as `device` to an evaluation, without copying it.
pub(crate) struct DeviceResolver<'a>(pub &'a CelDevice);

impl cel::context::VariableResolver for DeviceResolver<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "device").then(|| CowVal::Borrowed(self.0 as &dyn Val))
    }
}
