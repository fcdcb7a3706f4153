//! What a service that embeds kynml-core sees, each in a process of its own:
//! rayon's global pool is the process's, so this runs apart from the other
//! tests, which start it.

use kynml_core::export::{self, Activation, ExportLayer, ExportModel, Format, Head};

/// A service sizes rayon's global pool itself (`build_global`, which fails
/// once the pool has started). Writing and loading a Burn record left it
/// started: the record was made on `Device::cpu()`, which sizes it.
#[test]
fn a_burn_record_is_written_and_read_without_starting_rayons_pool() {
    let model = ExportModel {
        name: "M".into(),
        input: 2,
        shape: kynml_core::model::Shape::flat(2),
        feature_names: vec!["a".into(), "b".into()],
        target: "y".into(),
        normalizer: None,
        categories: Vec::new(),
        tokens: None,
        sequence: None,
        layers: vec![ExportLayer::dense(2, 1, vec![1.0, 2.0], vec![0.5], Activation::Linear)],
        head: Head::Regression,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.mpk");
    export::write(&model, Format::Burn, &path).unwrap();
    let back = export::load(&path).unwrap();
    assert_eq!(back.forward(&[1.0, 1.0]).unwrap(), [3.5]);
    rayon::ThreadPoolBuilder::new().num_threads(3).build_global().expect("the pool was started");
}
