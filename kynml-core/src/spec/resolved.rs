//! The spec as a run resolved it, in the language's own terms: every key of
//! the blocks a run uses, with its default filled in where the spec is
//! silent, for `spec.resolved.json`. Bare words stay the words a spec
//! writes (`cross_entropy`, `bf16`), a call becomes an object with its
//! `name` and every argument, and `null` stands only for "none" (no
//! scheduler, no text column).

use serde_json::{json, Value};

use super::types::{
    Autotune, Clip, DeviceSet, ExportFormat, Loss, LossScale, Optimizer, Precision, SchedulerKind, Spec,
};
use crate::model::LayerSpec;
use crate::train::precision::ScalerConfig;

/// `spec` with its defaults filled in (and whatever the command line
/// overrode already applied to it), as JSON.
pub fn resolved(spec: &Spec) -> Value {
    let d = &spec.dataset;
    let t = &spec.train;
    let workers = d.num_workers.value;
    // The loader's own rule (two batches a worker when unwritten, none
    // without workers unless written), before any cut to an epoch's batches.
    let (_, prefetch) = crate::data::loader_within(workers, d.prefetch.as_ref().map(|p| p.value), usize::MAX);
    let names = |v: &[super::types::Spanned<String>]| v.iter().map(|s| s.value.clone()).collect::<Vec<_>>();
    let loss = t.loss.value;
    json!({
        "dataset": {
            "name": d.name.value,
            "source": d.source.value.display().to_string(),
            "target": d.target.value,
            "categorical": names(&d.categorical),
            "tokens": d.tokens.as_ref().map(|s| s.value.clone()),
            "vocab": d.vocab.as_ref().map(|s| s.value),
            "sequence": names(&d.sequence),
            "split": d.split.value,
            "normalize": d.normalize,
            "num_workers": workers,
            "pin_memory": d.pin_memory.value,
            "prefetch": prefetch,
        },
        "model": {
            "name": spec.model.name.value,
            "input": spec.model.shape.written(),
            "layers": spec.model.layers.iter().map(|l| layer(&l.value)).collect::<Vec<_>>(),
        },
        "train": {
            "model": spec.model.name.value,
            "data": d.name.value,
            "loss": loss_json(loss),
            "optimizer": optimizer(&t.optimizer.value),
            "epochs": t.epochs.value,
            "batch": t.batch.value,
            "accumulate": t.accumulate.value,
            // One or the other, as the language takes them.
            "device": t.devices.is_none().then(|| t.device.value.name()),
            "devices": t.devices.as_ref().map(|s| match &s.value {
                DeviceSet::AllCuda => json!("cuda:all"),
                DeviceSet::List(list) => json!(list.iter().map(|d| d.name()).collect::<Vec<_>>()),
            }),
            "scheduler": t.scheduler.as_ref().map(|s| {
                let mut v = match s.value.kind {
                    SchedulerKind::Cosine { t_max, eta_min } => json!({"name": "cosine", "t_max": t_max, "eta_min": eta_min}),
                    SchedulerKind::Step { step_size, gamma } => json!({"name": "step", "step_size": step_size, "gamma": gamma}),
                    SchedulerKind::Exponential { gamma } => json!({"name": "exponential", "gamma": gamma}),
                };
                v["warmup"] = json!(s.value.warmup);
                v
            }),
            "early_stop": t.early_stop.as_ref().map(|s| json!({"patience": s.value.patience, "min_delta": s.value.min_delta})),
            "checkpoint": t.checkpoint.as_ref().map(|s| json!({
                "every_n": s.value.every_n,
                "path": s.value.path.display().to_string(),
                "async_save": s.value.async_save,
                "keep": s.value.keep,
            })),
            "precision": crate::plan::precision_name(t.precision.value),
            "loss_scale": loss_scale(t.loss_scale.value, t.precision.value),
            "compile": t.compile.value,
            // Unwritten, CubeCL's own default.
            "autotune": t.autotune.as_ref().map_or(Autotune::Balanced, |a| a.value).name(),
            "profile": t.profile.value,
            "checkpoint_activations": t.checkpoint_activations.value,
            "deterministic": t.deterministic.value,
            "clip_grad_norm": t.clip.as_ref().and_then(|c| match c.value { Clip::Norm(x) => Some(x), Clip::Value(_) => None }),
            "clip_grad_value": t.clip.as_ref().and_then(|c| match c.value { Clip::Value(x) => Some(x), Clip::Norm(_) => None }),
            "seed": t.seed,
        },
        "evaluate": {
            "metrics": crate::train::metrics_for(spec, loss).iter().map(|m| m.name()).collect::<Vec<_>>(),
        },
        "export": spec.export.as_ref().map(|e| json!({
            "format": match e.format.value {
                ExportFormat::Onnx => "onnx",
                ExportFormat::Safetensors => "safetensors",
                ExportFormat::Burn => "burn",
                ExportFormat::Torchscript => "torchscript",
            },
            "path": e.path.value.display().to_string(),
        })),
    })
}

/// A layer line as written (`dense 32 relu`); a `residual:` block as
/// `{"residual": [its layers]}`.
fn layer(l: &LayerSpec) -> Value {
    match l.children() {
        [] => json!(l.describe()),
        inner => json!({ "residual": inner.iter().map(layer).collect::<Vec<_>>() }),
    }
}

fn loss_json(loss: Loss) -> Value {
    match loss {
        Loss::Mse => json!("mse"),
        Loss::Mae => json!("mae"),
        Loss::Huber { delta } => json!({"name": "huber", "delta": delta}),
        Loss::CrossEntropy => json!("cross_entropy"),
        Loss::Bce => json!("bce"),
    }
}

fn optimizer(o: &Optimizer) -> Value {
    // `fused` unwritten is the plain update.
    let fused = o.fused().unwrap_or(false);
    match *o {
        Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay, .. }
        | Optimizer::Adam { lr, beta1, beta2, eps, weight_decay, .. } => json!({
            "name": o.name(), "lr": lr, "betas": [beta1, beta2], "eps": eps, "weight_decay": weight_decay, "fused": fused,
        }),
        Optimizer::Sgd { lr, momentum, dampening, weight_decay, nesterov, .. } => json!({
            "name": "sgd", "lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
            "nesterov": nesterov, "fused": fused,
        }),
        Optimizer::RmsProp { lr, alpha, eps, weight_decay, momentum, centered } => json!({
            "name": "rmsprop", "lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
            "momentum": momentum, "centered": centered,
        }),
    }
}

/// `none`, or dynamic scaling with every setting; unwritten, what the
/// precision asks for (dynamic for fp16).
fn loss_scale(scale: LossScale, precision: Precision) -> Value {
    let dynamic = |c: ScalerConfig| json!({"name": "dynamic", "init": c.init, "growth": c.growth, "interval": c.interval, "backoff": c.backoff});
    match (scale, precision) {
        (LossScale::None, _) => json!("none"),
        (LossScale::Auto, Precision::Fp16) => dynamic(ScalerConfig::default()),
        (LossScale::Auto, _) => json!("none"),
        (LossScale::Dynamic { init, growth, interval, backoff }, _) => {
            dynamic(ScalerConfig { init, growth, backoff, interval })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Spec {
        crate::spec::parse_spec(text).expect("a valid spec")
    }

    const DATA: &str = "dataset D:\n    source = csv(\"d.csv\")\n    target = \"y\"\n";

    #[test]
    fn defaults_are_filled_in_in_the_languages_words() {
        let spec = parse(&format!(
            "{DATA}model M:\n    input 4\n    dense 8 relu\n    residual:\n        dense 8 gelu\n    dense 3 linear\n\
             train:\n    loss = cross_entropy\n    epochs = 2\n"
        ));
        let v = resolved(&spec);
        let text = v.to_string();
        assert!(!text.contains("span") && !text.contains("CrossEntropy") && !text.contains("AdamW"), "{text}");
        assert_eq!(v["train"]["loss"], "cross_entropy");
        assert_eq!(
            v["train"]["optimizer"],
            json!({"name": "adamw", "lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01, "fused": false})
        );
        assert_eq!(v["train"]["batch"], 32);
        assert_eq!(v["train"]["device"], "auto");
        assert_eq!(v["train"]["precision"], "fp32");
        assert_eq!(v["train"]["loss_scale"], "none");
        assert_eq!(v["train"]["autotune"], "balanced");
        assert_eq!(v["train"]["seed"], 42);
        assert_eq!(v["train"]["scheduler"], Value::Null);
        assert_eq!(v["dataset"]["split"], 0.8);
        assert_eq!(v["dataset"]["prefetch"], 0);
        assert_eq!(v["model"]["input"], "4");
        assert_eq!(v["model"]["layers"], json!(["dense 8 relu", {"residual": ["dense 8 gelu"]}, "dense 3 linear"]));
        assert_eq!(v["evaluate"]["metrics"], json!(["accuracy", "precision", "recall", "f1"]));
        assert_eq!(v["export"], Value::Null);
    }

    #[test]
    fn written_settings_are_kept_and_the_implied_ones_resolved() {
        let spec = parse(&format!(
            "{DATA}    num_workers = 3\nmodel M:\n    input 2\n    dense 1 linear\n\
             train:\n    loss = huber(delta=2)\n    optimizer = sgd(lr=0.1, momentum=0.9, nesterov=true)\n    epochs = 2\n\
             \x20   precision = fp16\n    scheduler = cosine(t_max=10, warmup=2)\n    clip_grad_value = 0.5\n    autotune = full\n\
             \x20   checkpoint = checkpoint(every_n=2, path=\"ck/x.ckpt\")\n\
             export:\n    format = onnx\n    path = \"m.onnx\"\n"
        ));
        let v = resolved(&spec);
        assert_eq!(v["train"]["loss"], json!({"name": "huber", "delta": 2.0}));
        assert_eq!(v["train"]["optimizer"]["nesterov"], true);
        assert_eq!(v["train"]["optimizer"]["dampening"], 0.0);
        assert_eq!(v["train"]["loss_scale"]["name"], "dynamic");
        assert_eq!(v["train"]["loss_scale"]["init"], 65536.0);
        assert_eq!(v["train"]["scheduler"], json!({"name": "cosine", "t_max": 10, "eta_min": 0.0, "warmup": 2}));
        assert_eq!(
            (v["train"]["clip_grad_value"].clone(), v["train"]["clip_grad_norm"].clone()),
            (json!(0.5), Value::Null)
        );
        assert_eq!(v["train"]["autotune"], "full");
        assert_eq!(
            v["train"]["checkpoint"],
            json!({"every_n": 2, "path": "ck/x.ckpt", "async_save": false, "keep": 1})
        );
        assert_eq!(v["dataset"]["prefetch"], 6, "two batches a worker");
        assert_eq!(v["evaluate"]["metrics"], json!(["mae", "rmse", "r2"]));
        assert_eq!(v["export"], json!({"format": "onnx", "path": "m.onnx"}));
        // `devices` stands alone, as the language takes it (with `device`
        // beside it, a spec written from the file was refused).
        let spec = parse(&format!(
            "{DATA}model M:\n    input 2\n    dense 1 linear\ntrain:\n    loss = mse\n    epochs = 2\n    \
             devices = [cpu, cpu]\n"
        ));
        let v = resolved(&spec);
        assert_eq!((v["train"]["device"].clone(), v["train"]["devices"].clone()), (Value::Null, json!(["cpu", "cpu"])));
    }
}
