//! The repository's `crds/` holds exactly what the Rust types generate: change a type, run
//! `cargo run -p warmpath-api --bin warmpath-crdgen`, commit both.

use std::path::Path;

#[test]
fn crds_folder_matches_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
    let files = warmpath_api::crds::files().expect("CRDs render");
    let stale = warmpath_api::crds::stale_files(&dir, &files);
    assert!(
        stale.is_empty(),
        "crds/ is out of date with api/:\n  {}\n(then run deploy/helm/sync-crds.sh for the chart's copy)",
        stale.join("\n  ")
    );
}

#[test]
fn drift_is_reported_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("warmpath-api-drift-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = warmpath_api::crds::files().unwrap();
    for f in &files {
        std::fs::write(dir.join(&f.name), &f.yaml).unwrap();
    }
    assert!(warmpath_api::crds::stale_files(&dir, &files).is_empty());

    let changed = dir.join(&files[0].name);
    std::fs::write(&changed, files[0].yaml.replace("ipool", "ip")).unwrap();
    std::fs::remove_file(dir.join(&files[1].name)).unwrap();
    std::fs::write(
        dir.join("old.warmpath.dev.yaml"),
        "kind: CustomResourceDefinition\n",
    )
    .unwrap();
    let stale = warmpath_api::crds::stale_files(&dir, &files);
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(stale.len(), 3, "{stale:#?}");
    assert!(stale[0].contains(&files[0].name) && stale[0].contains("differs"));
    assert!(stale[0].contains(warmpath_api::crds::REGENERATE));
    assert!(stale[1].contains(&files[1].name) && stale[1].contains(warmpath_api::crds::REGENERATE));
    assert!(stale[2].contains("old.warmpath.dev.yaml") && stale[2].contains("delete it"));
}
