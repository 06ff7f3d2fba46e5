//! The Kubernetes DRA CEL environment on top of the `cel` crate.
//!
//! `cel` 0.15 is maintained, has custom types, functions and macros, and evaluates a
//! pre-converted device fast enough (hundreds of thousands of evaluations a second on one
//! core). What Kubernetes adds and `cel` lacks is added here: the `device` variable with
//! domain-scoped attribute and capacity maps ([`device`]), `semver()` ([`semver`]) and
//! `quantity()` ([`quantity`]), the `cel.bind` macro, two-variable comprehensions
//! ([`comprehensions`]), regular expressions compiled once and bounded ([`pattern`]), and an
//! estimated-cost limit ([`cost`]).
//!
//! Each distinct expression compiles once per [`CelEnvironment`]; the compiled form carries a
//! small dense id so that callers can cache per-(expression, device) results.

pub mod collections;
pub mod comprehensions;
pub mod cost;
pub mod device;
pub mod pattern;
pub mod quantity;
pub mod semver;

use cel::common::ast::{ComprehensionExpr, Expr, ListExpr};
use cel::parser::Macro;
use cel::{Context, Env, Program, Value};
pub use device::CelDevice;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Why a selector cannot be used, or failed on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    #[error("CEL expression {expression:?} does not compile: {message}")]
    Compile { expression: String, message: String },
    #[error(
        "CEL expression {expression:?} is too expensive: estimated cost {estimated} exceeds the limit of {limit}"
    )]
    CostLimit {
        expression: String,
        estimated: u64,
        limit: u64,
    },
    #[error("CEL expression is {length} characters long, more than the limit of {limit}")]
    TooLong { length: usize, limit: usize },
    #[error("CEL runtime error in {expression:?}: {message}")]
    Runtime { expression: String, message: String },
}

/// A selector compiled in the DRA environment.
#[derive(Debug)]
pub struct CompiledExpression {
    id: u32,
    source: String,
    program: Program,
    estimated_cost: u64,
}

impl CompiledExpression {
    /// Dense id, unique within its [`CelEnvironment`]: a cache key.
    pub fn id(&self) -> u32 {
        self.id
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn estimated_cost(&self) -> u64 {
        self.estimated_cost
    }
}

/// The DRA CEL environment and its compile cache.
pub struct CelEnvironment {
    env: Arc<Env>,
    compiled: Mutex<HashMap<String, Result<Arc<CompiledExpression>, CelError>>>,
    cost_limit: u64,
    /// `DRAListTypeAttributes`: the `includes` helper exists only with it on, as upstream
    /// declares it only then.
    list_type_attributes: bool,
}

impl std::fmt::Debug for CelEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CelEnvironment")
            .field("cost_limit", &self.cost_limit)
            .finish_non_exhaustive()
    }
}

impl Default for CelEnvironment {
    fn default() -> Self {
        CelEnvironment::new()
    }
}

/// `cel.bind(name, init, body)`: evaluates `init` once, names it, and evaluates `body`.
/// Expanded, as in cel-go, into a comprehension over an empty list whose accumulator is the
/// bound name.
fn bind_macro() -> Macro {
    Macro::receiver("bind", 3, |helper, target, args| {
        let is_cel = matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel");
        if !is_cel {
            return Ok(None);
        }
        let name = match args.first().map(|a| &a.expr) {
            Some(Expr::Ident(n)) => n.clone(),
            _ => {
                let id = args.first().map(|a| a.id).unwrap_or(0);
                return Err(
                    helper.new_error(id, "cel.bind() variable name must be a simple identifier")
                );
            }
        };
        let body = args.pop();
        let init = args.pop();
        let (Some(init), Some(body)) = (init, body) else {
            return Ok(None);
        };
        target.take();
        let range = helper.next_expr(Expr::List(ListExpr::new(Vec::new())));
        let cond = helper.next_expr(Expr::Literal(cel::common::ast::LiteralValue::Boolean(
            false.into(),
        )));
        let step = helper.next_expr(Expr::Ident(name.clone()));
        Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(
            ComprehensionExpr {
                iter_range: range,
                iter_var: "#unused".to_string(),
                iter_var2: None,
                accu_var: name,
                accu_init: init,
                loop_cond: cond,
                loop_step: step,
                result: body,
            },
        )))))
    })
}

impl CelEnvironment {
    /// The environment with Kubernetes' limits, every gated function declared.
    pub fn new() -> CelEnvironment {
        CelEnvironment::with_cost_limit(cost::MAX_SELECTOR_COST)
    }

    /// The environment kube-scheduler compiles selectors in under `features`.
    pub fn for_features(features: &crate::features::Features) -> CelEnvironment {
        CelEnvironment {
            list_type_attributes: features.list_type_attributes,
            ..CelEnvironment::new()
        }
    }

    /// The environment with a different estimated-cost limit (tests, tighter operators).
    pub fn with_cost_limit(cost_limit: u64) -> CelEnvironment {
        CelEnvironment {
            env: Arc::new(build_env()),
            compiled: Mutex::new(HashMap::new()),
            cost_limit,
            list_type_attributes: true,
        }
    }

    /// Compiles `expression` once; later calls with the same text return the same result.
    pub fn compile(&self, expression: &str) -> Result<Arc<CompiledExpression>, CelError> {
        let mut cache = match self.compiled.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(hit) = cache.get(expression) {
            return hit.clone();
        }
        let id = u32::try_from(cache.len()).unwrap_or(u32::MAX);
        let result = self.compile_uncached(expression, id);
        cache.insert(expression.to_string(), result.clone());
        result
    }

    fn compile_uncached(
        &self,
        expression: &str,
        id: u32,
    ) -> Result<Arc<CompiledExpression>, CelError> {
        if expression.len() > cost::MAX_SELECTOR_LENGTH {
            return Err(CelError::TooLong {
                length: expression.len(),
                limit: cost::MAX_SELECTOR_LENGTH,
            });
        }
        let program = self
            .env
            .compile(expression)
            .map_err(|e| CelError::Compile {
                expression: expression.to_string(),
                message: e.to_string(),
            })?;
        for var in cost::free_variables(program.expression()) {
            if var != "device" {
                return Err(CelError::Compile {
                    expression: expression.to_string(),
                    message: format!("undeclared reference to {var:?}"),
                });
            }
        }
        if !self.list_type_attributes {
            let mut includes = false;
            pattern::visit(program.expression(), &mut |call| {
                includes |= call.func_name == "includes";
            });
            if includes {
                return Err(CelError::Compile {
                    expression: expression.to_string(),
                    message: "undeclared reference to 'includes' (it needs the feature gate \
                              DRAListTypeAttributes, which is off)"
                        .into(),
                });
            }
        }
        if let Some(message) = pattern::first_bad_literal(program.expression()) {
            return Err(CelError::Compile {
                expression: expression.to_string(),
                message,
            });
        }
        let estimated_cost = cost::estimate(program.expression());
        if estimated_cost > self.cost_limit {
            return Err(CelError::CostLimit {
                expression: expression.to_string(),
                estimated: estimated_cost,
                limit: self.cost_limit,
            });
        }
        Ok(Arc::new(CompiledExpression {
            id,
            source: expression.to_string(),
            program,
            estimated_cost,
        }))
    }

    /// Evaluates a compiled selector against one device. A result that is not a boolean, or
    /// any runtime error (such as a missing attribute), is an error, as in Kubernetes.
    pub fn evaluate(
        &self,
        expression: &CompiledExpression,
        device: &CelDevice,
    ) -> Result<bool, CelError> {
        let resolver = device::DeviceResolver(device);
        let mut context = Context::with_env(self.env.clone());
        context.set_variable_resolver(&resolver);
        match expression.program.execute(&context) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CelError::Runtime {
                expression: expression.source.clone(),
                message: format!(
                    "expression must evaluate to a bool, got {:?}",
                    other.type_of()
                ),
            }),
            Err(e) => Err(CelError::Runtime {
                expression: expression.source.clone(),
                message: e.to_string(),
            }),
        }
    }
}

fn build_env() -> Env {
    let mut env = Env::stdlib();
    // Each registration below is of functions no other part registers, so a failure here is a
    // programming error caught by every test; it is still handled rather than unwrapped.
    let results = [
        env.add_extension(cel::extensions::strings),
        env.add_extension(semver::extension),
        env.add_extension(quantity::extension),
        env.add_extension(collections::extension),
        env.add_extension(pattern::extension),
        env.add_extension(comprehensions::extension),
        env.add_macro(bind_macro()),
    ];
    debug_assert!(results.iter().all(Result::is_ok), "{results:?}");
    env
}
