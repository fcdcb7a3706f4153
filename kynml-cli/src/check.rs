//! `kynml check SPEC`: validate the spec and its data, print the model.

use kynml_core::model::summarize;
use kynml_core::plan::SpecFile;

use crate::args::CheckArgs;
use crate::failure::Failure;
use crate::render;

pub fn run(args: CheckArgs) -> Result<(), Failure> {
    let mut file = SpecFile::load(&args.spec)?;
    let data = file.load_data()?;
    println!("{}: ok", args.spec.display());
    let classes = match data.class_names() {
        Some(names) => format!(", {} classes ({})", names.len(), names.join(", ")),
        None => String::new(),
    };
    println!(
        "data {}: {} rows ({} train, {} validation), {} features, target `{}`{classes}\n",
        file.data_path().display(),
        data.train.len() + data.valid.len(),
        data.train.len(),
        data.valid.len(),
        data.n_features(),
        data.info.target,
    );
    for v in &data.info.categories {
        let unseen = match v.unseen_in_validation {
            0 => String::new(),
            n => format!("; {n} validation rows hold a value training never saw (index 0)"),
        };
        println!("categorical `{}`: {} values in the training rows{unseen}", v.column, v.values.len());
    }
    if !data.info.categories.is_empty() {
        println!();
    }
    println!("{}", render::model_table(&summarize(&file.spec.model)));
    Ok(())
}
