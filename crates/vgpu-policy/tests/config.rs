use std::path::PathBuf;
use vgpu_policy::config::{ACCEPTED_SIZE_FORMS, Config, ConfigError};

const GIB: u64 = 1 << 30;

fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_vars(vars.iter().copied())
}

fn err_line(vars: &[(&str, &str)]) -> String {
    cfg(vars).unwrap_err().to_string()
}

#[test]
fn empty_environment_is_default() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c, Config::default());
    assert!(!c.disabled);
    assert_eq!(c.log_level, 2);
    assert_eq!(c.memory_limit_for(0), None);
    assert_eq!(c.sm_limit_for(0), None);
    assert!(!c.any_limit());
}

#[test]
fn unknown_variables_are_ignored() {
    let c = cfg(&[
        ("PATH", "/usr/bin"),
        ("CUDA_DEVICE_MEMORY", "garbage"),
        ("cuda_device_memory_limit", "garbage"),
        ("CUDA_DEVICE_MEMORY_LIMITX", "garbage"),
        ("XCUDA_DEVICE_MEMORY_LIMIT_1", "garbage"),
    ])
    .unwrap();
    assert_eq!(c, Config::default());
}

#[test]
fn disable_control() {
    for v in [
        "true", "TRUE", "True", "1", "yes", "YES", "on", "On", " true ",
    ] {
        assert!(cfg(&[("CUDA_DISABLE_CONTROL", v)]).unwrap().disabled, "{v}");
    }
    for v in ["false", "FALSE", "0", "no", "No", "off", "OFF", ""] {
        assert!(
            !cfg(&[("CUDA_DISABLE_CONTROL", v)]).unwrap().disabled,
            "{v}"
        );
    }
    for v in ["2", "y", "enable", "truee"] {
        let e = cfg(&[("CUDA_DISABLE_CONTROL", v)]).unwrap_err();
        assert_eq!(e.variable, "CUDA_DISABLE_CONTROL");
        assert_eq!(e.value, v);
    }
    assert_eq!(
        err_line(&[("CUDA_DISABLE_CONTROL", "maybe")]),
        "vgpu: CUDA_DISABLE_CONTROL=\"maybe\" is not a valid switch; use true, 1, yes, on (disable) or false, 0, no, off (keep enabled)"
    );
}

#[test]
fn log_level() {
    for l in 0..=5u8 {
        assert_eq!(
            cfg(&[("LIBCUDA_LOG_LEVEL", &l.to_string())])
                .unwrap()
                .log_level,
            l
        );
    }
    assert_eq!(cfg(&[("LIBCUDA_LOG_LEVEL", "")]).unwrap().log_level, 2);
    // A bad level bears on no limit: the default, and one warning (HAMi passes its own log
    // setting through as free text; a typo there must not stop every CUDA program of a pod).
    for v in ["6", "-1", "+1", "debug", "256", "1.0"] {
        let c = cfg(&[("LIBCUDA_LOG_LEVEL", v)]).unwrap();
        assert_eq!(c.log_level, 2, "{v}");
        assert_eq!(c.ignored.len(), 1, "{v}");
    }
    let p =
        vgpu_policy::plan::Plan::resolve_with(&cfg(&[("LIBCUDA_LOG_LEVEL", "9")]).unwrap(), false);
    assert_eq!(
        p.notices()[0].text,
        "LIBCUDA_LOG_LEVEL=\"9\" is not a valid log level: ignored, as HAMi-core does (use 0 (errors), 1 or 2 (errors and warnings), 3 (info), 4 (debug) or 5 (trace))"
    );
}

#[test]
fn memory_limit_all() {
    let c = cfg(&[("CUDA_DEVICE_MEMORY_LIMIT", "4g")]).unwrap();
    assert_eq!(c.memory_limit_all, Some(4 * GIB));
    assert_eq!(c.memory_limit_for(0), Some(4 * GIB));
    assert_eq!(c.memory_limit_for(63), Some(4 * GIB));
    assert!(c.any_limit());
    for v in ["4294967296", "4096m", "4Gi", "4GiB", "4gb", " 4g "] {
        assert_eq!(
            cfg(&[("CUDA_DEVICE_MEMORY_LIMIT", v)])
                .unwrap()
                .memory_limit_all,
            Some(4 * GIB)
        );
    }
}

#[test]
fn zero_or_empty_memory_limit_means_none() {
    for v in ["0", "0g", "", "  "] {
        let c = cfg(&[("CUDA_DEVICE_MEMORY_LIMIT", v)]).unwrap();
        assert_eq!(c.memory_limit_all, None, "{v:?}");
        assert!(!c.any_limit());
    }
}

#[test]
fn per_index_overrides_all() {
    let c = cfg(&[
        ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_1", "2g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_10", "1g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "8g"),
    ])
    .unwrap();
    assert_eq!(
        c.memory_limit_by_index,
        vec![(0, Some(8 * GIB)), (1, Some(2 * GIB)), (10, Some(GIB))]
    );
    assert_eq!(c.memory_limit_for(0), Some(8 * GIB));
    assert_eq!(c.memory_limit_for(1), Some(2 * GIB));
    assert_eq!(c.memory_limit_for(2), Some(4 * GIB));
    assert_eq!(c.memory_limit_for(10), Some(GIB));
    assert_eq!(c.memory_limit_for(1000), Some(4 * GIB));
}

#[test]
fn per_index_without_all() {
    let c = cfg(&[("CUDA_DEVICE_MEMORY_LIMIT_63", "1g")]).unwrap();
    assert_eq!(c.memory_limit_for(63), Some(GIB));
    assert_eq!(c.memory_limit_for(0), None);
    assert!(c.any_limit());
}

#[test]
fn per_index_zero_means_no_limit_on_that_device() {
    // Issue 13 item 15: a per-device 0 is "no limit on that device" (as the README says), not
    // a fallback to the all-devices limit. An empty value is unset: the all-devices one applies.
    let c = cfg(&[
        ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_1", "0"),
        ("CUDA_DEVICE_MEMORY_LIMIT_2", ""),
        ("CUDA_DEVICE_SM_LIMIT", "30"),
        ("CUDA_DEVICE_SM_LIMIT_1", "0"),
    ])
    .unwrap();
    assert_eq!(c.memory_limit_by_index, vec![(1, None)]);
    assert_eq!(c.memory_limit_for(1), None);
    assert_eq!(c.memory_limit_for(0), Some(4 * GIB));
    assert_eq!(c.memory_limit_for(2), Some(4 * GIB));
    assert_eq!(c.sm_limit_for(1), None);
    assert_eq!(c.sm_limit_for(0), Some(30));
    let c = cfg(&[("CUDA_DEVICE_MEMORY_LIMIT_1", "0")]).unwrap();
    assert_eq!(c.memory_limit_for(1), None);
    assert!(!c.any_limit());
}

#[test]
fn later_value_wins() {
    let c = cfg(&[
        ("CUDA_DEVICE_MEMORY_LIMIT_2", "1g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_2", "3g"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "1g"),
        ("CUDA_DEVICE_MEMORY_LIMIT", "2g"),
    ])
    .unwrap();
    assert_eq!(c.memory_limit_by_index, vec![(2, Some(3 * GIB))]);
    assert_eq!(c.memory_limit_all, Some(2 * GIB));
}

#[test]
fn bad_memory_values_give_exact_message() {
    assert_eq!(
        err_line(&[("CUDA_DEVICE_MEMORY_LIMIT_1", "12zz")]),
        "vgpu: CUDA_DEVICE_MEMORY_LIMIT_1=\"12zz\" is not a valid size; use a byte count or a number with a binary suffix k, m, g, t (e.g. 4g, 4096m, 4Gi, 4294967296)"
    );
    assert_eq!(
        err_line(&[("CUDA_DEVICE_MEMORY_LIMIT", "1.5g")]),
        format!(
            "vgpu: CUDA_DEVICE_MEMORY_LIMIT=\"1.5g\" is not a valid size; use {ACCEPTED_SIZE_FORMS}"
        )
    );
    for v in [
        "-5g",
        "+5g",
        "abc",
        "g",
        "1.5.g",
        "16777216t",
        "99999999999999999999",
    ] {
        let e = cfg(&[("CUDA_DEVICE_MEMORY_LIMIT", v)]).unwrap_err();
        assert_eq!(
            e,
            ConfigError {
                variable: "CUDA_DEVICE_MEMORY_LIMIT".into(),
                value: v.into(),
                accepted: ACCEPTED_SIZE_FORMS,
                problem: "is not a valid size",
            }
        );
    }
}

#[test]
fn message_stays_on_one_line() {
    let line = err_line(&[("CUDA_DEVICE_MEMORY_LIMIT", "4g\nrm -rf /")]);
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains(r#""4g\nrm -rf /""#), "{line}");
}

#[test]
fn bad_index_is_an_error() {
    for name in [
        "CUDA_DEVICE_MEMORY_LIMIT_x",
        "CUDA_DEVICE_MEMORY_LIMIT_",
        "CUDA_DEVICE_MEMORY_LIMIT_64",
        "CUDA_DEVICE_MEMORY_LIMIT_01",
        "CUDA_DEVICE_MEMORY_LIMIT_-1",
        "CUDA_DEVICE_MEMORY_LIMIT_+1",
        "CUDA_DEVICE_MEMORY_LIMIT_1a",
        "CUDA_DEVICE_MEMORY_LIMIT_99999999999",
        "CUDA_DEVICE_SM_LIMIT_x",
        "CUDA_DEVICE_SM_LIMIT_64",
    ] {
        let e = cfg(&[(name, "1g")]).unwrap_err();
        assert_eq!(e.variable, name);
        assert_eq!(e.problem, "names no valid device index");
    }
    assert_eq!(
        err_line(&[("CUDA_DEVICE_MEMORY_LIMIT_x", "4g")]),
        "vgpu: CUDA_DEVICE_MEMORY_LIMIT_x=\"4g\" names no valid device index; use a device ordinal 0 to 63 after the underscore, without leading zeros (e.g. CUDA_DEVICE_MEMORY_LIMIT_1)"
    );
}

#[test]
fn sm_limits() {
    let c = cfg(&[
        ("CUDA_DEVICE_SM_LIMIT", "50"),
        ("CUDA_DEVICE_SM_LIMIT_3", "25"),
        ("CUDA_DEVICE_SM_LIMIT_1", "100"),
        ("CUDA_DEVICE_SM_LIMIT_2", "0"),
    ])
    .unwrap();
    assert_eq!(c.sm_limit_all, Some(50));
    assert_eq!(
        c.sm_limit_by_index,
        vec![(1, Some(100)), (2, None), (3, Some(25))]
    );
    assert_eq!(c.sm_limit_for(0), Some(50));
    assert_eq!(c.sm_limit_for(1), Some(100));
    assert_eq!(c.sm_limit_for(2), None, "a per-device 0 is no limit there");
    assert_eq!(c.sm_limit_for(3), Some(25));
    assert!(c.any_limit());
    assert_eq!(c.memory_limit_for(0), None);

    assert_eq!(
        cfg(&[("CUDA_DEVICE_SM_LIMIT", "0")]).unwrap().sm_limit_all,
        None
    );
    assert_eq!(
        cfg(&[("CUDA_DEVICE_SM_LIMIT", "")]).unwrap().sm_limit_all,
        None
    );
    assert_eq!(
        cfg(&[("CUDA_DEVICE_SM_LIMIT", "1")]).unwrap().sm_limit_all,
        Some(1)
    );
    // 100 % is the whole device: recorded, but not a limit that needs enforcing.
    let full = cfg(&[("CUDA_DEVICE_SM_LIMIT", "100")]).unwrap();
    assert_eq!(full.sm_limit_all, Some(100));
    assert!(!full.any_limit());
    for v in ["101", "255", "256", "-1", "50%", "0.5", "half"] {
        assert!(cfg(&[("CUDA_DEVICE_SM_LIMIT", v)]).is_err(), "{v}");
    }
    assert_eq!(
        err_line(&[("CUDA_DEVICE_SM_LIMIT_0", "150")]),
        "vgpu: CUDA_DEVICE_SM_LIMIT_0=\"150\" is not a valid SM percentage; use a whole percentage 1 to 100 (0 means no limit)"
    );
}

#[test]
fn shared_region_path() {
    let c = cfg(&[("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu/region.cache")]).unwrap();
    assert_eq!(
        c.shared_region_path,
        Some(PathBuf::from("/tmp/vgpu/region.cache"))
    );
    assert_eq!(
        cfg(&[("CUDA_DEVICE_MEMORY_SHARED_CACHE", "")])
            .unwrap()
            .shared_region_path,
        None
    );
    assert!(!c.any_limit());
}

#[test]
fn accepts_owned_pairs() {
    let vars: Vec<(String, String)> = vec![("CUDA_DEVICE_MEMORY_LIMIT".into(), "1g".into())];
    assert_eq!(Config::from_vars(vars).unwrap().memory_limit_all, Some(GIB));
    let map: std::collections::HashMap<&str, String> =
        [("LIBCUDA_LOG_LEVEL", "4".to_string())].into();
    assert_eq!(Config::from_vars(map).unwrap().log_level, 4);
}

#[test]
fn from_env_reads_process_environment() {
    // The test process has no vgpu variables set unless the caller exported some;
    // either way from_env must agree with from_vars over the same environment.
    assert_eq!(Config::from_env(), Config::from_vars(std::env::vars()));
}

mod plan {
    use super::*;
    use std::time::Duration;
    use vgpu_policy::plan::{Activity, NoticeLevel, Plan, SmShare};

    fn plan(vars: &[(&str, &str)]) -> Plan {
        Plan::resolve_with(&cfg(vars).unwrap(), false)
    }

    #[test]
    fn a_share_never_holds_0_or_100() {
        assert_eq!(SmShare::new(0), None);
        assert_eq!(SmShare::new(100), None);
        assert_eq!(SmShare::new(101), None);
        assert_eq!(SmShare::new(1).map(SmShare::percent), Some(1));
        assert_eq!(SmShare::new(99).map(SmShare::percent), Some(99));
    }

    #[test]
    fn devices_resolve_once_with_policy_and_zero_rules() {
        let p = plan(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "0"),
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("CUDA_DEVICE_SM_LIMIT_2", "100"),
            ("CUDA_DEVICE_SM_LIMIT_3", "0"),
        ]);
        assert_eq!(p.activity, Activity::Enforce);
        assert_eq!(p.device(0).memory_limit, Some(4 * GIB));
        assert_eq!(p.device(1).memory_limit, None);
        assert_eq!(p.device(0).sm_share, SmShare::new(30));
        assert_eq!(p.device(2).sm_share, None);
        assert_eq!(p.device(3).sm_share, None);
        let p = plan(&[
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("GPU_CORE_UTILIZATION_POLICY", "disable"),
        ]);
        assert_eq!(p.activity, Activity::PassThrough);
        assert_eq!(p.device(0).sm_share, None);
        // The policy applies to the region's live value too.
        assert_eq!(p.sm_share_in_force(0, Some(Some(30))), None);
        let p = plan(&[("CUDA_DEVICE_SM_LIMIT", "30")]);
        assert_eq!(p.sm_share_in_force(0, Some(Some(50))), SmShare::new(50));
        assert_eq!(p.sm_share_in_force(0, Some(None)), None);
        assert_eq!(p.sm_share_in_force(0, None), SmShare::new(30));
        assert!(p.gate(None).is_none());
        assert!(plan(&[("VGPU_MEASURE_GPU_TIME", "1")]).gate(None).is_some());
        assert_eq!(
            plan(&[("CUDA_DISABLE_CONTROL", "1")]).activity,
            Activity::Disabled
        );
    }

    #[test]
    fn a_per_index_limit_past_the_containers_devices_is_a_warning() {
        let p = plan(&[
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g"),
            ("CUDA_DEVICE_SM_LIMIT_3", "30"),
        ]);
        let n = p.limits_for_missing_devices(1);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n.iter().all(|n| n.level == NoticeLevel::Warning));
        assert_eq!(
            n[0].text,
            "CUDA_DEVICE_MEMORY_LIMIT_1 (1 GiB) names device 1, but the container has 1 GPU \
             (index 0): it limits nothing; no device of this container is limited"
        );
        assert!(
            n[1].text
                .starts_with("CUDA_DEVICE_SM_LIMIT_3 (30%) names device 3")
        );
        assert!(p.limits_for_missing_devices(4).is_empty());
        let n = p.limits_for_missing_devices(2);
        assert_eq!(n.len(), 1);
        assert!(!n[0].text.contains("no device"), "{}", n[0].text);
        // Another limit still holds: the warning does not say the container is unlimited.
        let p = plan(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "2g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_5", "1g"),
        ]);
        let n = p.limits_for_missing_devices(2);
        assert!(
            n[0].text.contains("2 GPUs (indices 0 to 1)"),
            "{}",
            n[0].text
        );
        assert!(!n[0].text.contains("no device"), "{}", n[0].text);
    }

    #[test]
    fn a_process_without_limits_of_its_own_follows_a_live_region() {
        for vars in [
            &[][..],
            &[("CUDA_DEVICE_MEMORY_LIMIT", "0")][..],
            &[
                ("CUDA_DISABLE_CONTROL", "1"),
                ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
            ][..],
        ] {
            let p = plan(vars);
            assert!(p.follows_live_region(), "{vars:?}");
            assert_eq!(p.activity_beside(true), Activity::Enforce, "{vars:?}");
            assert_eq!(p.activity_beside(false), p.activity, "{vars:?}");
        }
        let p = plan(&[("CUDA_DEVICE_MEMORY_LIMIT", "1g")]);
        assert!(!p.follows_live_region());
        assert_eq!(p.activity_beside(false), Activity::Enforce);
    }

    #[test]
    fn node_dir_and_region_location() {
        assert_eq!(
            plan(&[]).node_dir,
            std::path::PathBuf::from("/tmp/vgpu-node")
        );
        let c = cfg(&[]).unwrap();
        assert_eq!(
            Plan::resolve_with(&c, true).node_dir,
            std::path::PathBuf::from("/tmp/vgpulock")
        );
        let p = plan(&[
            ("VGPU_NODE_DIR", "/x/node"),
            ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/x/region"),
        ]);
        assert_eq!(p.node_dir, std::path::PathBuf::from("/x/node"));
        assert_eq!(p.shared_cache, Some(std::path::PathBuf::from("/x/region")));
        assert!(p.to_string().contains("node dir /x/node"), "{p}");
    }

    #[test]
    fn task_priority_is_validated() {
        assert_eq!(plan(&[("CUDA_TASK_PRIORITY", "1")]).task_priority, Some(1));
        // Not an integer: no priority, with a warning naming the variable.
        let p = plan(&[("CUDA_TASK_PRIORITY", "high")]);
        assert_eq!(p.task_priority, None);
        assert!(p.notices()[0].text.contains("CUDA_TASK_PRIORITY"));
    }

    #[test]
    fn per_index_limits_number_the_containers_devices_not_the_programs_ordinals() {
        // Issue 13 item 16: `_<i>` is the device's index in the container's list (NVML's).
        let vars = [
            ("CUDA_VISIBLE_DEVICES", "1,0"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "4g"),
        ];
        let p = plan(&vars);
        // Ordinal 0 is NVML device 1: the limit of index 1.
        assert_eq!(p.container_index(0, Some(1)), 1);
        assert_eq!(
            p.device(p.container_index(0, Some(1))).memory_limit,
            Some(4 * GIB)
        );
        assert_eq!(
            p.device(p.container_index(1, Some(0))).memory_limit,
            Some(GIB)
        );
        // Without NVML, an index entry of CUDA_VISIBLE_DEVICES names the device; else the
        // ordinal stands.
        assert_eq!(p.container_index(0, None), 1);
        assert_eq!(p.container_index(1, None), 0);
        assert_eq!(
            plan(&[("CUDA_VISIBLE_DEVICES", "GPU-5a")]).container_index(0, None),
            0
        );
        assert_eq!(plan(&[]).container_index(2, None), 2);
    }

    #[test]
    fn task_priority_is_clamped_to_hamis_two_values_with_one_warning() {
        assert_eq!(plan(&[]).task_priority, None);
        assert!(plan(&[]).notices().is_empty());
        for (given, used) in [("0", 0), ("1", 1), (" 0 ", 0)] {
            let p = plan(&[("CUDA_TASK_PRIORITY", given)]);
            assert_eq!(p.task_priority, Some(used), "{given}");
            assert!(p.notices().is_empty(), "{given}");
        }
        for (given, used) in [("7", 1), ("-3", 0), ("2", 1)] {
            let p = plan(&[("CUDA_TASK_PRIORITY", given)]);
            assert_eq!(p.task_priority, Some(used), "{given}");
            let n = p.notices();
            assert_eq!(n.len(), 1, "{n:?}");
            assert_eq!(n[0].level, NoticeLevel::Warning);
            assert!(
                n[0].text
                    .contains(&format!("CUDA_TASK_PRIORITY={}", given.trim()))
                    && n[0].text.contains(&format!("using {used}")),
                "{}",
                n[0].text
            );
        }
    }

    #[test]
    fn a_task_priority_activates_vgpu_and_gates_every_device() {
        // HAMi's webhook injects CUDA_TASK_PRIORITY: with it, even without any limit, every
        // device gets a gate at 100 % (launches marked for the monitor, its block obeyed).
        let p = plan(&[("CUDA_TASK_PRIORITY", "0")]);
        assert_eq!(p.activity, Activity::Enforce);
        assert_eq!(p.device(0).sm_share, None);
        let g = p.gate(None).expect("a gate for the monitor protocol");
        assert_eq!(g.share, None);
        assert!(!g.measuring, "a priority alone measures nothing");
        let g = p.gate(SmShare::new(30)).unwrap();
        assert_eq!(g.share, SmShare::new(30));
        // Disabled stays disabled.
        let p = plan(&[("CUDA_TASK_PRIORITY", "0"), ("CUDA_DISABLE_CONTROL", "1")]);
        assert_eq!(p.activity, Activity::Disabled);
        // Without a priority: no gate without a share (as before).
        assert!(
            plan(&[("CUDA_DEVICE_MEMORY_LIMIT", "1g")])
                .gate(None)
                .is_none()
        );
    }

    #[test]
    fn record_kernel_interval_is_whole_seconds_default_one() {
        assert_eq!(plan(&[]).record_kernel_interval, Duration::from_secs(1));
        assert_eq!(
            plan(&[("RECORD_KERNEL_INTERVAL", "5")]).record_kernel_interval,
            Duration::from_secs(5)
        );
        assert_eq!(
            plan(&[("RECORD_KERNEL_INTERVAL", "0")]).record_kernel_interval,
            Duration::ZERO
        );
        assert_eq!(
            plan(&[("RECORD_KERNEL_INTERVAL", "")]).record_kernel_interval,
            Duration::from_secs(1)
        );
        for v in ["-1", "1.5", "1s", "x", "99999999999"] {
            let c = cfg(&[("RECORD_KERNEL_INTERVAL", v)]).unwrap();
            let e = &c.ignored[0];
            assert_eq!(e.variable, "RECORD_KERNEL_INTERVAL", "{v}");
            assert!(e.to_string().contains("whole number of seconds"), "{e}");
            assert_eq!(c.record_kernel_interval_s, None, "{v}");
        }
        // It is no limit: alone it leaves vgpu passing through.
        assert_eq!(
            plan(&[("RECORD_KERNEL_INTERVAL", "3")]).activity,
            Activity::PassThrough
        );
    }

    #[test]
    fn oversubscribe_and_the_oom_killer_are_read_and_explained_not_obeyed() {
        let p = plan(&[
            ("CUDA_DEVICE_MEMORY_LIMIT", "1g"),
            ("CUDA_OVERSUBSCRIBE", "true"),
            ("ACTIVE_OOM_KILLER", "true"),
        ]);
        assert!(p.config().oversubscribe);
        assert_eq!(p.config().active_oom_killer, Some(true));
        // The limit holds whatever they say.
        assert_eq!(p.device(0).memory_limit, Some(GIB));
        let n = p.notices();
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n.iter().all(|n| n.level == NoticeLevel::Info), "{n:?}");
        assert!(n[0].text.starts_with("CUDA_OVERSUBSCRIBE=true"), "{n:?}");
        assert!(n[0].text.contains("limit holds"), "{n:?}");
        assert!(n[1].text.starts_with("ACTIVE_OOM_KILLER=true"), "{n:?}");
        // Off, or unset: nothing to say.
        for (k, v) in [("CUDA_OVERSUBSCRIBE", "false"), ("ACTIVE_OOM_KILLER", "0")] {
            assert!(plan(&[(k, v)]).notices().is_empty(), "{k}={v}");
        }
        assert_eq!(
            plan(&[("ACTIVE_OOM_KILLER", "")])
                .config()
                .active_oom_killer,
            None
        );
        // A bad value is ignored with a warning, named, with the plain switch forms.
        for k in ["CUDA_OVERSUBSCRIBE", "ACTIVE_OOM_KILLER"] {
            let c = cfg(&[(k, "maybe")]).unwrap();
            let e = &c.ignored[0];
            assert_eq!(e.variable, k);
            assert!(
                e.to_string()
                    .ends_with("use true, 1, yes, on or false, 0, no, off"),
                "{e}"
            );
        }
        // Neither is a limit.
        assert_eq!(
            plan(&[("CUDA_OVERSUBSCRIBE", "true")]).activity,
            Activity::PassThrough
        );
    }

    /// Issue 26 item 10: `VGPU_OBSERVE` accounts without limiting: vgpu is active (a region,
    /// memory charged on every device), GPU time is measured, and the environment's limits
    /// are not set (one warning says so); the policy still applies to live limits in the
    /// region, which an observing process follows like any other.
    #[test]
    fn observe_accounts_and_measures_but_sets_no_limit() {
        let p = plan(&[("VGPU_OBSERVE", "1")]);
        assert!(p.observe);
        assert_eq!(p.activity, Activity::Enforce);
        assert!(p.measuring);
        assert_eq!(p.device(0), Default::default());
        let g = p.gate(None).expect("a measuring gate");
        assert!(g.measuring && g.share.is_none());
        assert!(p.notices().is_empty(), "{:?}", p.notices());
        let p = plan(&[
            ("VGPU_OBSERVE", "true"),
            ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
            ("CUDA_DEVICE_SM_LIMIT_1", "30"),
        ]);
        assert_eq!(p.device(0), Default::default());
        assert_eq!(p.device(1), Default::default());
        // A live limit (vgpu limit, or a limiting process of the container) is followed.
        assert_eq!(p.sm_share_in_force(1, Some(Some(40))), SmShare::new(40));
        let n = p.notices();
        assert_eq!(n.len(), 1, "{n:?}");
        assert_eq!(n[0].level, NoticeLevel::Warning);
        for s in [
            "VGPU_OBSERVE",
            "CUDA_DEVICE_MEMORY_LIMIT",
            "CUDA_DEVICE_SM_LIMIT",
            "not enforced",
        ] {
            assert!(n[0].text.contains(s), "{s}: {}", n[0].text);
        }
        assert!(p.to_string().contains("observe true"), "{p}");
        // Off, or disabled: as without it.
        assert!(!plan(&[("VGPU_OBSERVE", "off")]).observe);
        assert_eq!(
            plan(&[("VGPU_OBSERVE", "0")]).activity,
            Activity::PassThrough
        );
        assert_eq!(
            plan(&[("VGPU_OBSERVE", "1"), ("CUDA_DISABLE_CONTROL", "1")]).activity,
            Activity::Disabled
        );
        let e = cfg(&[("VGPU_OBSERVE", "maybe")]).unwrap_err();
        assert_eq!(e.variable, "VGPU_OBSERVE");
    }

    #[test]
    fn nvml_devices_map_to_ordinals_as_the_driver_reads_visible_devices() {
        let p = |v: &str| plan(&[("CUDA_VISIBLE_DEVICES", v)]);
        assert_eq!(plan(&[]).ordinal_of_nvml(3, "GPU-a"), Some(3));
        assert_eq!(p("1").ordinal_of_nvml(1, "GPU-a"), Some(0));
        assert_eq!(p("1").ordinal_of_nvml(0, "GPU-a"), None);
        assert_eq!(p("1,0").ordinal_of_nvml(0, "GPU-a"), Some(1));
        assert_eq!(p("GPU-5a1e,0").ordinal_of_nvml(7, "GPU-5a1e0000"), Some(0));
        assert_eq!(p("").ordinal_of_nvml(0, "GPU-a"), None);
        // Issue 13 item 16: the driver stops at the first invalid or repeated entry, so the
        // GPUs after it are not this process's devices and take no per-ordinal limit.
        assert_eq!(p("1,bogus,0").ordinal_of_nvml(0, "GPU-a"), None);
        assert_eq!(p("1,1,0").ordinal_of_nvml(0, "GPU-a"), None);
    }
}

#[test]
fn context_size() {
    use vgpu_policy::plan::{DEFAULT_CONTEXT_SIZE, Plan};
    let size = |v: &[(&str, &str)]| Plan::resolve_with(&cfg(v).unwrap(), false).context_size;
    assert_eq!(size(&[]), DEFAULT_CONTEXT_SIZE);
    assert_eq!(size(&[("VGPU_CONTEXT_SIZE", "")]), DEFAULT_CONTEXT_SIZE);
    assert_eq!(size(&[("VGPU_CONTEXT_SIZE", "600m")]), 600 << 20);
    assert_eq!(size(&[("VGPU_CONTEXT_SIZE", "0")]), 0);
    let e = err_line(&[("VGPU_CONTEXT_SIZE", "big")]);
    assert!(
        e.contains("VGPU_CONTEXT_SIZE") && e.contains("not a valid size"),
        "{e}"
    );
}

/// Issue 14: the downward-API variables are read into the plan's pod identity; a value that is
/// not a Kubernetes name is left out, never an error (they are not vgpu's variables).
#[test]
fn kubernetes_identity_from_downward_api_variables() {
    use vgpu_policy::plan::{Plan, PodIdentity};
    let c = cfg(&[
        ("POD_NAMESPACE", "ml-team"),
        ("POD_NAME", "trainer-7d9f8b6c4-x2x9q"),
        ("CONTAINER_NAME", "pytorch"),
    ])
    .unwrap();
    assert_eq!(c.pod_namespace.as_deref(), Some("ml-team"));
    let p = Plan::resolve_with(&c, false);
    assert_eq!(
        p.pod,
        PodIdentity {
            namespace: Some("ml-team".into()),
            pod: Some("trainer-7d9f8b6c4-x2x9q".into()),
            container: Some("pytorch".into()),
        }
    );
    // Unset, empty or not a name: absent.
    let c = cfg(&[
        ("POD_NAMESPACE", ""),
        ("POD_NAME", "evil\"} 1\nx"),
        ("CONTAINER_NAME", &"c".repeat(64)),
    ])
    .unwrap();
    assert!(Plan::resolve_with(&c, false).pod.is_empty());
    assert!(Plan::resolve_with(&cfg(&[]).unwrap(), false).pod.is_empty());
}

#[test]
fn path_variables_keep_bytes_that_are_not_utf8() {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let path = |b: u8| OsString::from_vec(vec![b'/', b't', b'/', b'r', b]);
    let cfg = |b: u8| {
        Config::from_vars_os([
            (OsString::from("CUDA_DEVICE_MEMORY_SHARED_CACHE"), path(b)),
            (OsString::from("VGPU_NODE_DIR"), path(b)),
            (
                OsString::from("CUDA_DEVICE_MEMORY_LIMIT"),
                OsString::from("1g"),
            ),
        ])
        .unwrap()
    };
    let (a, b) = (cfg(0xfe), cfg(0xff));
    assert_eq!(
        a.shared_region_path
            .as_deref()
            .unwrap()
            .as_os_str()
            .as_bytes(),
        b"/t/r\xfe"
    );
    assert_eq!(
        a.node_dir.as_deref().unwrap().as_os_str().as_bytes(),
        b"/t/r\xfe"
    );
    assert_ne!(a.shared_region_path, b.shared_region_path);
    assert_eq!(a.memory_limit_all, Some(1 << 30));
    // A number that is not UTF-8 is refused, naming the variable.
    let e = Config::from_vars_os([(
        OsString::from("CUDA_DEVICE_MEMORY_LIMIT"),
        OsString::from_vec(vec![b'1', 0xff]),
    )])
    .unwrap_err();
    assert!(e.to_string().contains("CUDA_DEVICE_MEMORY_LIMIT"), "{e}");
    // Empty is unset, as for text.
    let c = Config::from_vars_os([(
        OsString::from("CUDA_DEVICE_MEMORY_SHARED_CACHE"),
        OsString::new(),
    )])
    .unwrap();
    assert_eq!(c.shared_region_path, None);
}
