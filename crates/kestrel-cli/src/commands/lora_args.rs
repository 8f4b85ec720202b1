//! `--lora FILE[,FILE...]` and `--lora-scaled FILE:SCALE[,FILE:SCALE...]`, as llama.cpp's tools
//! take them (and its older `--lora-scaled FILE SCALE`): LoRA adapters (GGUF) applied on top of
//! the model, each with its scale (1 for `--lora`). Both repeat; the `--lora` ones are applied
//! first, then the `--lora-scaled` ones, each in the order given. `--lora-init-without-apply`
//! loads them all at scale 0 (for `kestrel serve`, where requests choose them).

use std::path::PathBuf;

use clap::{ArgAction, Args};

/// The adapter flags.
#[derive(Args, Debug, Default, Clone)]
pub struct LoraArgs {
    /// LoRA adapters (GGUF) applied with scale 1, comma-separated; repeat for more.
    #[arg(long = "lora", value_name = "FILE", value_delimiter = ',', action = ArgAction::Append)]
    pub lora: Vec<PathBuf>,
    /// LoRA adapters applied with a scale: FILE:SCALE, comma-separated (or FILE SCALE); repeat
    /// for more.
    #[arg(long = "lora-scaled", num_args = 1..=2, value_names = ["FILE:SCALE", "SCALE"], action = ArgAction::Append)]
    pub lora_scaled: Vec<String>,
    /// Load the adapters with scale 0 (off until a request or `POST /lora-adapters` turns
    /// them on).
    #[arg(long = "lora-init-without-apply")]
    pub lora_init_without_apply: bool,
}

impl LoraArgs {
    /// The adapters with their scales, in the order they are applied.
    pub fn adapters(&self) -> Result<Vec<(PathBuf, f32)>, String> {
        let mut out: Vec<(PathBuf, f32)> = self.lora.iter().map(|p| (p.clone(), 1.0)).collect();
        let number = |file: &str, scale: &str| -> Result<f32, String> {
            scale
                .parse()
                .ok()
                .filter(|s: &f32| s.is_finite())
                .ok_or_else(|| format!("--lora-scaled {file}: scale {scale:?} is not a number"))
        };
        // The values of every occurrence, one after another: a `FILE:SCALE[,...]` list is one
        // value whose items all end in `:number`; anything else is a FILE followed by its SCALE.
        let mut it = self.lora_scaled.iter();
        while let Some(v) = it.next() {
            let list: Option<Vec<(&str, &str)>> = v
                .split(',')
                .map(|item| {
                    item.rsplit_once(':')
                        .filter(|(_, s)| s.parse::<f32>().is_ok())
                })
                .collect();
            match list {
                Some(items) => {
                    for (file, scale) in items {
                        out.push((PathBuf::from(file), number(file, scale)?));
                    }
                }
                None => {
                    let scale = it
                        .next()
                        .ok_or_else(|| format!("--lora-scaled {v}: expected FILE:SCALE"))?;
                    out.push((PathBuf::from(v), number(v, scale)?));
                }
            }
        }
        if self.lora_init_without_apply {
            for (_, s) in &mut out {
                *s = 0.0;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::LoraArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lora: LoraArgs,
    }

    #[test]
    fn adapters_come_with_their_scales_in_order() {
        let cli = Cli::try_parse_from([
            "x",
            "--lora-scaled",
            "b.gguf",
            "0.5",
            "--lora",
            "a.gguf,a2.gguf",
            "--lora-scaled",
            "c.gguf:-1.25,d.gguf:2",
        ])
        .unwrap();
        let got = cli.lora.adapters().unwrap();
        let names: Vec<(String, f32)> = got
            .iter()
            .map(|(p, s)| (p.display().to_string(), *s))
            .collect();
        assert_eq!(
            names,
            [
                ("a.gguf".to_string(), 1.0),
                ("a2.gguf".to_string(), 1.0),
                ("b.gguf".to_string(), 0.5),
                ("c.gguf".to_string(), -1.25),
                ("d.gguf".to_string(), 2.0)
            ]
        );
        let bad = Cli::try_parse_from(["x", "--lora-scaled", "b.gguf", "half"]).unwrap();
        assert!(bad.lora.adapters().unwrap_err().contains("not a number"));
        let bare = Cli::try_parse_from(["x", "--lora-scaled", "b.gguf"]).unwrap();
        assert!(bare.lora.adapters().unwrap_err().contains("FILE:SCALE"));
        let off = Cli::try_parse_from([
            "x",
            "--lora",
            "a.gguf",
            "--lora-scaled",
            "b.gguf:0.5",
            "--lora-init-without-apply",
        ])
        .unwrap();
        let scales: Vec<f32> = off.lora.adapters().unwrap().iter().map(|a| a.1).collect();
        assert_eq!(scales, [0.0, 0.0]);
    }
}
