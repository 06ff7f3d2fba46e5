//! The DRA CEL environment: device variable, Kubernetes library, bind, cost, cache.

use crate::builders::{self, AttributeArg};
use crate::cel::{CelDevice, CelEnvironment, CelError};
use std::sync::Arc;

fn gpu() -> CelDevice {
    let d = builders::device("gpu-0");
    let d = builders::with_attribute(
        d,
        "productName",
        AttributeArg::Str("NVIDIA H100 80GB HBM3".into()),
    );
    let d = builders::with_attribute(d, "index", AttributeArg::Int(3));
    let d = builders::with_attribute(d, "mig", AttributeArg::Bool(false));
    let d = builders::with_attribute(
        d,
        "driverVersion",
        AttributeArg::Version("550.54.15".into()),
    );
    let d = builders::with_attribute(d, "numa.example.com/node", AttributeArg::Int(1));
    let d = builders::with_capacity(d, "memory", "80Gi");
    CelDevice::new("gpu.nvidia.com", &d)
}

fn eval(expr: &str) -> Result<bool, CelError> {
    let env = CelEnvironment::new();
    let compiled = env.compile(expr)?;
    env.evaluate(&compiled, &gpu())
}

fn yes(expr: &str) {
    assert_eq!(eval(expr), Ok(true), "{expr}");
}

fn no(expr: &str) {
    assert_eq!(eval(expr), Ok(false), "{expr}");
}

#[test]
fn device_fields_and_typed_attributes() {
    yes(r#"device.driver == "gpu.nvidia.com""#);
    yes(r#"device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3""#);
    yes(r#"device.attributes["gpu.nvidia.com"].index == 3"#);
    yes(r#"device.attributes["gpu.nvidia.com"].mig == false"#);
    yes(r#"device.attributes["numa.example.com"].node == 1"#);
    yes(r#"device.allowMultipleAllocations == false"#);
    no(r#"device.attributes["gpu.nvidia.com"].index > 3"#);
    // Type-aware: an int attribute is not the string "3".
    assert!(eval(r#"device.attributes["gpu.nvidia.com"].index == "3""#) != Ok(true));
}

#[test]
fn unknown_domain_is_an_empty_map() {
    no(r#""productName" in device.attributes["other.example.com"]"#);
    yes(r#""productName" in device.attributes["gpu.nvidia.com"]"#);
    no(r#"has(device.attributes["other.example.com"].productName)"#);
    yes(r#"has(device.attributes["gpu.nvidia.com"].productName)"#);
    yes(r#"size(device.attributes["other.example.com"]) == 0 || true"#);
}

#[test]
fn missing_attribute_is_a_runtime_error() {
    match eval(r#"device.attributes["gpu.nvidia.com"].nope == 1"#) {
        Err(CelError::Runtime { message, .. }) => assert!(message.contains("nope"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn non_boolean_result_is_an_error() {
    assert!(matches!(eval("1 + 1"), Err(CelError::Runtime { .. })));
}

#[test]
fn semver_library() {
    yes(r#"device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))"#);
    yes(r#"device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.54.15")) == 0"#);
    yes(r#"device.attributes["gpu.nvidia.com"].driverVersion.major() == 550"#);
    yes(r#"device.attributes["gpu.nvidia.com"].driverVersion.minor() == 54"#);
    yes(r#"device.attributes["gpu.nvidia.com"].driverVersion.patch() == 15"#);
    yes(r#"semver("1.2.3").isLessThan(semver("1.10.0"))"#);
    yes(r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0"))"#);
    // Build metadata does not count in comparisons.
    yes(r#"semver("1.0.0+build1").compareTo(semver("1.0.0+build2")) == 0"#);
    yes(r#"semver("1.0.0+build1") == semver("1.0.0")"#);
    yes(r#"isSemver("1.2.3") && !isSemver("1.2") && isSemver("v1.2", true)"#);
    yes(r#"semver("v01.2", true) == semver("1.2.0")"#);
    assert!(matches!(
        eval(r#"semver("bad") == semver("1.0.0")"#),
        Err(CelError::Runtime { .. })
    ));
}

#[test]
fn quantity_library() {
    yes(r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#);
    yes(r#"device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80G"))"#);
    yes(r#"device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")"#);
    yes(r#"quantity("1").isLessThan(quantity("1001m"))"#);
    yes(r#"quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")"#);
    yes(r#"quantity("1Gi").sub(1).asInteger() == 1073741823"#);
    yes(r#"quantity("1Gi").add(1).asInteger() == 1073741825"#);
    yes(r#"quantity("1500m").isInteger() == false && quantity("2k").isInteger()"#);
    yes(r#"quantity("-1").sign() == -1 && quantity("0").sign() == 0"#);
    yes(r#"quantity("1500m").asApproximateFloat() == 1.5"#);
    yes(r#"isQuantity("10Mi") && !isQuantity("ten")"#);
    // Exact beyond f64: 2^63-1 and 2^63-2 differ.
    yes(r#"quantity("9223372036854775807").isGreaterThan(quantity("9223372036854775806"))"#);
    assert!(matches!(
        eval(r#"quantity("1500m").asInteger() == 1"#),
        Err(CelError::Runtime { .. })
    ));
}

#[test]
fn strings_regex_lists() {
    yes(r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")"#);
    yes(r#"device.attributes["gpu.nvidia.com"].productName.matches("H100.*HBM3$")"#);
    yes(r#"device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")"#);
    yes(r#"device.attributes["gpu.nvidia.com"].productName.split(" ").size() == 4"#);
    yes(r#"device.attributes["gpu.nvidia.com"].index in [1, 2, 3]"#);
    yes(r#"[1, 2, 3].exists(i, i == device.attributes["gpu.nvidia.com"].index)"#);
    yes(r#"[1, 2, 3].all(i, i > 0)"#);
}

#[test]
fn cel_bind() {
    yes(
        r#"cel.bind(attrs, device.attributes["gpu.nvidia.com"], attrs.index == 3 && attrs.productName.startsWith("NVIDIA"))"#,
    );
    yes(r#"cel.bind(x, 2, cel.bind(y, x * 3, y == 6))"#);
}

#[test]
fn compile_errors() {
    assert!(matches!(
        eval("device.driver =="),
        Err(CelError::Compile { .. })
    ));
    assert!(matches!(
        eval("other.driver == 'x'"),
        Err(CelError::Compile { .. })
    ));
    let long = format!("device.driver == \"{}\"", "a".repeat(11 * 1024));
    assert!(matches!(eval(&long), Err(CelError::TooLong { .. })));
}

#[test]
fn cost_limit_rejects_expensive_expressions() {
    // Nested comprehensions over literal lists multiply.
    let list = format!(
        "[{}]",
        (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let nested = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
    match eval(&nested) {
        Err(CelError::CostLimit {
            estimated, limit, ..
        }) => assert!(estimated > limit),
        other => panic!("{other:?}"),
    }
    // A bind chain doubling a string grows exponentially.
    let mut expr = "x0.size() > 0".to_string();
    for i in (1..=40).rev() {
        expr = format!("cel.bind(x{i}, x{} + x{}, {expr})", i - 1, i - 1);
    }
    expr = format!("cel.bind(x0, device.driver, {expr})");
    let expr = expr.replace("x0.size()", "x40.size()");
    assert!(
        matches!(eval(&expr), Err(CelError::CostLimit { .. })),
        "{expr}"
    );
    // The benchmark selector is cheap.
    let env = CelEnvironment::new();
    let c = env.compile(crate::bench::BENCH_SELECTOR).unwrap();
    assert!(c.estimated_cost() < 1000, "{}", c.estimated_cost());
}

#[test]
fn tighter_cost_limit() {
    let env = CelEnvironment::with_cost_limit(5);
    assert!(matches!(
        env.compile(r#"device.attributes["a"].b == "c" && device.attributes["a"].d == "e""#),
        Err(CelError::CostLimit { .. })
    ));
}

#[test]
fn compile_cache_returns_the_same_program() {
    let env = CelEnvironment::new();
    let a = env.compile("device.driver == 'a'").unwrap();
    let b = env.compile("device.driver == 'a'").unwrap();
    let c = env.compile("device.driver == 'b'").unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.id(), b.id());
    assert_ne!(a.id(), c.id());
}

#[test]
fn sets_and_lists() {
    yes("sets.contains([1, 2, 3], [2, 3]) && !sets.contains([1], [2])");
    yes("sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 2])");
    yes("sets.intersects([1, 2], [2, 5]) && !sets.intersects([1], [3])");
    yes("[1, 2, 3].isSorted() && ![3, 1].isSorted()");
    yes("[1, 2, 3].sum() == 6 && [4, 1, 9].min() == 1 && [4, 1, 9].max() == 9");
    yes("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(7) == -1");
    yes(r#"["a", "b"].indexOf("b") == 1 && "abc".indexOf("c") == 2"#);
    assert!(matches!(
        eval("[].max() == 1"),
        Err(CelError::Runtime { .. })
    ));
}

#[test]
fn regex_library_find_and_find_all() {
    yes(r#"device.attributes["gpu.nvidia.com"].productName.find("[0-9]+GB") == "80GB""#);
    yes(r#"device.attributes["gpu.nvidia.com"].productName.find("A100") == """#);
    yes(r#""a1 b22 c333".findAll("[0-9]+") == ["1", "22", "333"]"#);
    yes(r#""a1 b22 c333".findAll("[0-9]+", 2) == ["1", "22"]"#);
    yes(r#""a1 b22".findAll("[0-9]+", 0) == [] && "a1".findAll("[0-9]+", -1) == ["1"]"#);
    yes(r#"matches("H100", "^H[0-9]+$") && "H100".matches("^H[0-9]+$")"#);
    yes(r#""%d GPUs of %s".format([8, "H100"]) == "8 GPUs of H100""#);
    // RE2's classes: `\w` does not match a non-ASCII letter.
    no(r#""é".matches("^\\w$")"#);
}

#[test]
fn a_bad_literal_pattern_refuses_the_selector_at_compile_time() {
    for pattern in ["(foo", "a{1001}", r"(\\pL{1000}){1000}"] {
        let expr =
            format!(r#"device.attributes["gpu.nvidia.com"].productName.matches("{pattern}")"#);
        match eval(&expr) {
            Err(CelError::Compile { message, .. }) => {
                assert!(
                    message.contains("regular expression") || message.contains("too complex"),
                    "{message}"
                )
            }
            other => panic!("{expr}: {other:?}"),
        }
    }
    // A pattern built at run time can only fail at run time, on the device.
    assert!(matches!(
        eval(r#""x".matches(device.attributes["gpu.nvidia.com"].productName + "(")"#),
        Err(CelError::Runtime { .. })
    ));
}

#[test]
fn a_wide_repetition_is_cheap_and_evaluates() {
    let env = CelEnvironment::new();
    let c = env
        .compile(r#"device.attributes["gpu.nvidia.com"].productName.matches("\\w{200}")"#)
        .unwrap();
    // Kubernetes' estimate: ceil(65 * 0.1) * ceil(7 * 0.25) for the call, plus the lookups.
    assert!(c.estimated_cost() < 100, "{}", c.estimated_cost());
    for _ in 0..1000 {
        assert_eq!(env.evaluate(&c, &gpu()), Ok(false));
    }
}

#[test]
fn two_variable_comprehensions() {
    yes("[10, 20, 30].all(i, v, v == (i + 1) * 10)");
    yes("[10, 20, 30].exists(i, v, i == 2 && v == 30)");
    no("[10, 20, 30].exists(i, v, i == 1 && v == 30)");
    yes("[1, 2, 3].existsOne(i, v, v > i + 1) == false && [1, 3].existsOne(i, v, v > i + 1)");
    yes(r#"{"a": 1, "b": 2}.all(k, v, (k == "a" && v == 1) || (k == "b" && v == 2))"#);
    yes("[1, 2, 3].transformList(i, v, v * i) == [0, 2, 6]");
    yes("[1, 2, 3].transformList(i, v, i > 0, v * 10) == [20, 30]");
    // Nested, the inner range shadowing the outer.
    yes("[[1], [2, 3]].all(i, row, row.all(j, x, x == i + j + 1))");
    yes(
        r#"device.attributes["gpu.nvidia.com"].productName.split(" ").exists(i, w, i == 1 && w == "H100")"#,
    );
    assert!(matches!(
        eval("[1].all(x, x, true)"),
        Err(CelError::Compile { .. })
    ));
}
