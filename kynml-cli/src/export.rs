//! `kynml export RUN --format F --path P`: a finished run's model in another format.

use kynml_core::export::{self, ExportError, Format};

use crate::args::ExportArgs;
use crate::failure::Failure;

pub fn run(args: ExportArgs) -> Result<(), Failure> {
    crate::output::check_model_path(&args.model)?;
    let format = Format::parse(&args.format).map_err(|e| Failure::input(format!("error: {e}")))?;
    if args.path.as_os_str() == "-" {
        return Err(Failure::input(
            "error: `--path -`: export writes a file (and beside a safetensors or Burn export, its .json \
             sidecar), not standard output; name the file, e.g. `--path model.onnx`",
        ));
    }
    export::check_writable(&args.path).map_err(|e| Failure::input(format!("error: {e}")))?;
    let model = export::load(&args.model).map_err(|e| Failure::input(format!("error: {e}")))?;
    let written = export::write(&model, format, &args.path).map_err(|e| match e {
        // The path given is wrong, not the run.
        ExportError::Foreign { .. }
        | ExportError::Invalid { .. }
        | ExportError::Unwritable { .. }
        | ExportError::SharedSidecar { .. } => Failure::input(format!("error: {e}")),
        e => Failure::run(format!("error: {e}")),
    })?;
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}
