//! libvgpu.so exports exactly the intended hooks and nothing else.
use std::process::Command;
use vgpu_tests::libvgpu;

const INTENDED: &[&str] = &[
    "cuArray3DCreate",
    "cuArray3DCreate_v2",
    "cuArrayCreate",
    "cuArrayCreate_v2",
    "cuArrayDestroy",
    "cuCtxCreate",
    "cuCtxCreate_v2",
    "cuCtxCreate_v3",
    "cuCtxCreate_v4",
    "cuCtxDestroy",
    "cuCtxDestroy_v2",
    "cuCtxSynchronize",
    "cuDeviceGraphMemTrim",
    "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset",
    "cuDevicePrimaryCtxReset_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceTotalMem",
    "cuDeviceTotalMem_v2",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
    "cuGraphAddMemAllocNode",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cuInit",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuLaunchKernel_ptsz",
    "cuMemAlloc",
    "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz",
    "cuMemFreeAsync",
    "cuMemFreeAsync_ptsz",
    "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz",
    "cuMemAllocManaged",
    "cuMemAllocPitch",
    "cuMemAllocPitch_v2",
    "cuMemAlloc_v2",
    "cuMemCreate",
    "cuMemFree",
    "cuMemFree_v2",
    "cuMemGetInfo",
    "cuMemGetInfo_v2",
    "cuMemcpy",
    "cuMemcpy_ptds",
    "cuMemcpy2DUnaligned_v2",
    "cuMemcpy2DUnaligned_v2_ptds",
    "cuMemcpy2D_v2",
    "cuMemcpy2D_v2_ptds",
    "cuMemcpy3DPeer",
    "cuMemcpy3DPeer_ptds",
    "cuMemcpy3D_v2",
    "cuMemcpy3D_v2_ptds",
    "cuMemcpyAtoH_v2",
    "cuMemcpyAtoH_v2_ptds",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoH_v2_ptds",
    "cuMemcpyHtoA_v2",
    "cuMemcpyHtoA_v2_ptds",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoD_v2_ptds",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolTrimTo",
    "cuMemRelease",
    "cuMemRetainAllocationHandle",
    "cuMemExportToShareableHandle",
    "cuMemMap",
    "cuMemUnmap",
    "cuGraphInstantiate",
    "cuGraphInstantiate_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams",
    "cuGraphExecDestroy",
    "cuGraphUpload",
    "cuGraphUpload_ptsz",
    "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuStreamBeginCapture",
    "cuStreamBeginCaptureToGraph",
    "cuStreamBeginCaptureToGraph_ptsz",
    "cuStreamBeginCapture_ptsz",
    "cuStreamBeginCapture_v2",
    "cuStreamBeginCapture_v2_ptsz",
    "cuStreamEndCapture",
    "cuStreamEndCapture_ptsz",
    "cuStreamQuery",
    "cuStreamQuery_ptsz",
    "cuStreamSynchronize",
    "cuStreamSynchronize_ptsz",
    "dlsym",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "vgpu_version",
    "nvmlInit",
    "nvmlInitWithFlags",
    "nvmlInit_v2",
    "nvmlShutdown",
];

#[test]
fn exported_symbols_are_exactly_the_hooks() {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(libvgpu())
        .output()
        .expect("nm (binutils) must be installed");
    assert!(out.status.success());
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    got.sort();
    let mut want: Vec<String> = INTENDED.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn every_hook_in_the_table_is_exported() {
    for h in vgpu::hooks::HOOKS {
        assert!(
            INTENDED.contains(&h.name),
            "{} missing from the intended set",
            h.name
        );
    }
    // The two exports that are not hooks: `dlsym` and `vgpu_version`.
    assert_eq!(vgpu::hooks::HOOKS.len() + 2, INTENDED.len());
}
