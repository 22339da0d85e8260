//! The fuzz targets' bodies (`fuzz/bodies.rs`) on stable, as a bounded regular test: over a
//! corpus of inputs that once mattered, and over generated inputs (proptest), so CI runs them
//! on every `cargo test` without cargo-fuzz or nightly. (Coverage-guided fuzzing remains the
//! cargo-fuzz targets' job: fuzz/README.md.)
use proptest::prelude::*;

include!("../fuzz/bodies.rs");

/// Sizes at the edges: suffixes, case, spaces, overflow, junk.
const SIZES: &[&str] = &[
    "",
    "0",
    "1",
    "1g",
    "1G",
    "1Gi",
    "1GiB",
    "1gb",
    "1024m",
    "1048576k",
    "16t",
    "17179869184t",
    "18446744073709551615",
    "18446744073709551616",
    "16777216t",
    " 4g ",
    "4 g",
    "-5g",
    "1.5g",
    "1.5.g",
    "12zz",
    "abc",
    "g",
    "0x10",
    "1e9",
    "\u{0660}",
    "1\u{00a0}g",
];

/// Environments: every variable vgpu reads, with good and bad values.
const CONFIGS: &[&str] = &[
    "",
    "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_LIMIT_1=0",
    "CUDA_DEVICE_MEMORY_LIMIT_63=2g\nCUDA_DEVICE_MEMORY_LIMIT_64=2g",
    "CUDA_DEVICE_MEMORY_LIMIT_01=2g",
    "CUDA_DEVICE_MEMORY_LIMIT_=2g",
    "CUDA_DEVICE_SM_LIMIT=101",
    "CUDA_DEVICE_SM_LIMIT=0\nCUDA_DEVICE_SM_LIMIT_3=50\nCUDA_DEVICE_SM_LIMIT_2=50",
    "CUDA_DEVICE_SM_LIMIT_1=-1",
    "LIBCUDA_LOG_LEVEL=9",
    "LIBCUDA_LOG_LEVEL=4",
    // The trace level (every timing sample): the body once allowed only 0-4, and the generated
    // environments hit "5" now and then (a CI run of 2026-12-04).
    "LIBCUDA_LOG_LEVEL=5",
    "LIBCUDA_LOG_LEVEL=6",
    "CUDA_DISABLE_CONTROL=maybe",
    "GPU_CORE_UTILIZATION_POLICY=FORCE",
    "GPU_CORE_UTILIZATION_POLICY=x\ny",
    "CUDA_TASK_PRIORITY=99999999999",
    "VGPU_CONTEXT_SIZE=512m\nVGPU_CONTEXT_SIZE=bad",
    "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_LIMIT=0",
    "CUDA_VISIBLE_DEVICES=1,bogus,0\nCUDA_DEVICE_MEMORY_LIMIT_1=1g",
    "=\n==\nCUDA_DEVICE_MEMORY_LIMIT==1g",
];

#[test]
fn the_fuzz_bodies_hold_over_the_corpus() {
    for s in SIZES {
        fuzz_parse_size(s.as_bytes());
        fuzz_config(format!("CUDA_DEVICE_MEMORY_LIMIT={s}").as_bytes());
        fuzz_config(format!("CUDA_DEVICE_MEMORY_LIMIT_7={s}").as_bytes());
        fuzz_config(format!("VGPU_CONTEXT_SIZE={s}").as_bytes());
    }
    for c in CONFIGS {
        fuzz_config(c.as_bytes());
    }
    fuzz_parse_size(&[0xff, 0xfe]);
    fuzz_config(&[0xff, b'=', 0xfe]);
}

/// A variable vgpu reads (or a near miss), for generated environments.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("CUDA_DEVICE_MEMORY_LIMIT".to_string()),
        Just("CUDA_DEVICE_SM_LIMIT".to_string()),
        (0u32..70).prop_map(|i| format!("CUDA_DEVICE_MEMORY_LIMIT_{i}")),
        (0u32..70).prop_map(|i| format!("CUDA_DEVICE_SM_LIMIT_{i}")),
        Just("LIBCUDA_LOG_LEVEL".to_string()),
        Just("CUDA_DISABLE_CONTROL".to_string()),
        Just("GPU_CORE_UTILIZATION_POLICY".to_string()),
        Just("CUDA_TASK_PRIORITY".to_string()),
        Just("VGPU_CONTEXT_SIZE".to_string()),
        "[A-Z_0-9]{0,30}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn parse_size_body_holds_for_generated_sizes(s in "[ 0-9]{0,22}[kKmMgGtTiIbB .x-]{0,4}") {
        fuzz_parse_size(s.as_bytes());
    }

    #[test]
    fn parse_size_body_holds_for_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..40)) {
        fuzz_parse_size(&b);
    }

    #[test]
    fn config_body_holds_for_generated_environments(
        lines in proptest::collection::vec((name(), "[ 0-9a-zA-Z.,_-]{0,24}"), 0..8)
    ) {
        let env: String = lines.iter().map(|(n, v)| format!("{n}={v}\n")).collect();
        fuzz_config(env.as_bytes());
    }
}
