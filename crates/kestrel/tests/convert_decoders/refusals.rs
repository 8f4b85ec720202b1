//! `kestrel convert` refuses what it cannot convert faithfully: an architecture nobody converts,
//! broken or inconsistent checkpoints (each with an error naming the file and the fault), and
//! experts that do not match the config; nothing is left behind.

use kestrel::convert::{convert_hf, ConvertError, ConvertOptions, OutType};
use kestrel_gguf::GgufFile;

use super::{convert_inputs, temp, tokenizer_sources};

#[test]
fn unknown_models_and_broken_checkpoints_are_refused() {
    let Some((smollm, gemma)) = tokenizer_sources() else {
        return;
    };
    let work = temp("bad");
    let cases = convert_inputs::cases();
    let qwen = cases.iter().find(|c| c.name == "qwen2").unwrap();
    let dir = work.join("q");
    convert_inputs::write_case(qwen, &dir, &smollm, &gemma);
    let out = work.join("out.gguf");
    let opts = ConvertOptions::new(OutType::F16);

    // An architecture nobody converts.
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(
        dir.join("config.json"),
        cfg.replace("Qwen2ForCausalLM", "FancyNewForCausalLM")
            .replace("\"qwen2\"", "\"fancy\""),
    )
    .unwrap();
    let e = convert_hf(&dir, &out, &opts).unwrap_err();
    assert!(matches!(e, ConvertError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("Qwen2ForCausalLM"), "{e}");
    std::fs::write(dir.join("config.json"), &cfg).unwrap();

    // GLM-4-9B as first released: its tiktoken vocabulary is read through remote code, which
    // kestrel does not run; it says so instead of guessing (the `-hf` release converts).
    let glm = cases.iter().find(|c| c.name == "glm-hf").unwrap();
    let gdir = work.join("glm");
    convert_inputs::write_case(glm, &gdir, &smollm, &gemma);
    let gcfg = std::fs::read_to_string(gdir.join("config.json")).unwrap();
    std::fs::write(
        gdir.join("config.json"),
        gcfg.replace("GlmForCausalLM", "ChatGLMModel"),
    )
    .unwrap();
    std::fs::remove_file(gdir.join("tokenizer.json")).unwrap();
    let e = convert_hf(&gdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("remote code") && e.contains("-hf"), "{e}");

    // A checkpoint shipped quantized in a way not read (FP8 and gpt-oss's MXFP4 are): refused,
    // not misread; so is an FP8 block size that is not two sizes.
    for (q, want) in [
        ("{\"quant_method\": \"awq\"}", "awq-quantized"),
        (
            "{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 0]}",
            "weight_block_size",
        ),
    ] {
        std::fs::write(
            dir.join("config.json"),
            cfg.replacen('{', &format!("{{\"quantization_config\": {q},"), 1),
        )
        .unwrap();
        let e = convert_hf(&dir, &out, &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    std::fs::write(dir.join("config.json"), &cfg).unwrap();

    // A pre-tokenizer llama.cpp does not know: refused, not guessed.
    let tj = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        tj.replacen("\"use_regex\":true", "\"use_regex\":false", 1),
    )
    .unwrap();
    let e = convert_hf(&dir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("pre-tokenizer"), "{e}");
    std::fs::write(dir.join("tokenizer.json"), &tj).unwrap();

    // A tensor the family does not have.
    let st = dir.join("model.safetensors");
    let good = std::fs::read(&st).unwrap();
    convert_inputs::write_safetensors(
        &dir.join("model-extra.safetensors"),
        &[(
            "model.layers.0.mlp.router.weight".into(),
            vec![4, 64],
            vec![0.0; 256],
        )],
        convert_inputs::Dt::F32,
    );
    let e = convert_hf(&dir, &out, &opts).unwrap_err().to_string();
    assert!(
        e.contains("cannot map tensor") && e.contains("router"),
        "{e}"
    );
    std::fs::remove_file(dir.join("model-extra.safetensors")).unwrap();

    // A truncated shard.
    std::fs::write(&st, &good[..good.len() / 2]).unwrap();
    let e = convert_hf(&dir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("model.safetensors"), "{e}");
    assert!(!out.exists() && !out.with_extension("gguf.partial").exists());

    // GLM-4 without the `<|user|>` token its converter takes as the end of turn.
    let glm = cases.iter().find(|c| c.name == "glm4").unwrap();
    let gdir = work.join("g");
    convert_inputs::write_case(glm, &gdir, &smollm, &gemma);
    convert_hf(&gdir, &out, &opts).unwrap();
    let tj = std::fs::read_to_string(gdir.join("tokenizer.json")).unwrap();
    std::fs::write(
        gdir.join("tokenizer.json"),
        tj.replace("<|user|>", "<|usr|>"),
    )
    .unwrap();
    let e = convert_hf(&gdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("<|user|>"), "{e}");

    // OpenELM: feed-forward sizes that do not match `ffn.proj_1`, and no tokenizer.model
    // (llama.cpp's converter falls back to a vocabulary of its own that kestrel does not carry).
    let elm = cases.iter().find(|c| c.name == "openelm").unwrap();
    let edir = work.join("e");
    convert_inputs::write_case(elm, &edir, &smollm, &gemma);
    let cfg = std::fs::read_to_string(edir.join("config.json")).unwrap();
    let wrong = cfg.replacen("\"ffn_dim_divisor\": 32", "\"ffn_dim_divisor\": 48", 1);
    assert_ne!(wrong, cfg);
    std::fs::write(edir.join("config.json"), wrong).unwrap();
    let e = convert_hf(&edir, &out, &opts).unwrap_err().to_string();
    assert!(
        e.contains("proj_1") && e.contains("feed-forward size"),
        "{e}"
    );
    std::fs::write(edir.join("config.json"), &cfg).unwrap();
    std::fs::remove_file(edir.join("tokenizer.model")).unwrap();
    let e = convert_hf(&edir, &out, &opts).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer.model") && e.contains("Llama 2"),
        "{e}"
    );

    // Mamba with a block expansion other than 2 (llama.cpp's converter asserts 2).
    let mamba = cases.iter().find(|c| c.name == "mamba").unwrap();
    let mdir = work.join("m");
    convert_inputs::write_case(mamba, &mdir, &smollm, &gemma);
    convert_hf(&mdir, &out, &opts).unwrap();
    let cfg = std::fs::read_to_string(mdir.join("config.json")).unwrap();
    std::fs::write(
        mdir.join("config.json"),
        cfg.replace("\"intermediate_size\": 128", "\"intermediate_size\": 192"),
    )
    .unwrap();
    let e = convert_hf(&mdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("intermediate_size 192"), "{e}");

    // Jamba with an attention period of 0, and without `tokenizer.model` and a tokenizer.json
    // that `LlamaHfVocab` reads (none, then a GPT-2-style one).
    let jamba = cases.iter().find(|c| c.name == "jamba").unwrap();
    let jdir = work.join("j");
    convert_inputs::write_case(jamba, &jdir, &smollm, &gemma);
    let cfg = std::fs::read_to_string(jdir.join("config.json")).unwrap();
    std::fs::write(
        jdir.join("config.json"),
        cfg.replace("\"attn_layer_period\": 2", "\"attn_layer_period\": 0"),
    )
    .unwrap();
    let e = convert_hf(&jdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("attn_layer_period"), "{e}");
    std::fs::write(jdir.join("config.json"), &cfg).unwrap();
    std::fs::remove_file(jdir.join("tokenizer.model")).unwrap();
    let e = convert_hf(&jdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("tokenizer.model"), "{e}");
    convert_inputs::write_smollm_tokenizer(&smollm, &jdir);
    let e = convert_hf(&jdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("SentencePiece-style"), "{e}");

    // A SentencePiece-style tokenizer.json whose special tokens or ids `LlamaHfVocab` would
    // read differently or not at all.
    let hf = cases.iter().find(|c| c.name == "llama-hf").unwrap();
    let ldir = work.join("l");
    convert_inputs::write_case(hf, &ldir, &smollm, &gemma);
    convert_hf(&ldir, &out, &opts).unwrap();
    let tc = std::fs::read_to_string(ldir.join("tokenizer_config.json")).unwrap();
    let tj = std::fs::read_to_string(ldir.join("tokenizer.json")).unwrap();
    for (file, from, to, want) in [
        (
            "tokenizer_config.json",
            "\"<|im_start|>\"",
            "\"<|nowhere|>\"",
            "<|nowhere|>",
        ),
        (
            "tokenizer_config.json",
            "\"LlamaTokenizer\"",
            "\"T5Tokenizer\"",
            "T5Tokenizer",
        ),
        ("tokenizer.json", "\"id\":284", "\"id\":290", "skip 284"),
        (
            "tokenizer.json",
            "\"id\":2,",
            "\"id\":5,",
            "which is the piece",
        ),
    ] {
        let (orig, path) = if file == "tokenizer.json" {
            (&tj, ldir.join(file))
        } else {
            (&tc, ldir.join(file))
        };
        assert!(orig.contains(from), "{file} has no {from}");
        std::fs::write(&path, orig.replacen(from, to, 1)).unwrap();
        let e = convert_hf(&ldir, &out, &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        std::fs::write(&path, orig).unwrap();
    }

    // Hunyuan's dynamic RoPE outside the converter's assumptions (it stops on them).
    let hy = cases.iter().find(|c| c.name == "hunyuan-dense").unwrap();
    let hdir = work.join("h");
    convert_inputs::write_case(hy, &hdir, &smollm, &gemma);
    convert_hf(&hdir, &out, &opts).unwrap();
    let cfg = std::fs::read_to_string(hdir.join("config.json")).unwrap();
    std::fs::write(
        hdir.join("config.json"),
        cfg.replace(
            "\"max_position_embeddings\": 32768",
            "\"max_position_embeddings\": 4096",
        ),
    )
    .unwrap();
    let e = convert_hf(&hdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("max_position_embeddings"), "{e}");

    // A Granite hybrid whose layers are all attention (llama.cpp switches it to another
    // architecture; not written yet).
    let gh = cases.iter().find(|c| c.name == "granitehybrid").unwrap();
    let gdir = work.join("gh");
    convert_inputs::write_case(gh, &gdir, &smollm, &gemma);
    convert_hf(&gdir, &out, &opts).unwrap();
    let cfg = std::fs::read_to_string(gdir.join("config.json")).unwrap();
    std::fs::write(
        gdir.join("config.json"),
        cfg.replace("\"mamba\"", "\"attention\""),
    )
    .unwrap();
    let e = convert_hf(&gdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("without Mamba layers"), "{e}");

    // Falcon-H1 without one of the multipliers llama.cpp's converter folds in (it stops).
    let fh = cases.iter().find(|c| c.name == "falcon-h1").unwrap();
    let fdir = work.join("fh");
    convert_inputs::write_case(fh, &fdir, &smollm, &gemma);
    convert_hf(&fdir, &out, &opts).unwrap();
    let cfg = std::fs::read_to_string(fdir.join("config.json")).unwrap();
    std::fs::write(
        fdir.join("config.json"),
        cfg.replace("\"key_multiplier\"", "\"key_multiplier_x\""),
    )
    .unwrap();
    let e = convert_hf(&fdir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("key_multiplier"), "{e}");

    // Nemotron-H: a pattern that does not cover the layers, an MLP letter in the MoE form;
    // a latent size without the latent projections, and a multi-token-prediction head (not
    // converted yet).
    let nh = cases.iter().find(|c| c.name == "nemotron-h").unwrap();
    let ndir = work.join("nh");
    convert_inputs::write_case(nh, &ndir, &smollm, &gemma);
    convert_hf(&ndir, &out, &opts).unwrap();
    let cfg = std::fs::read_to_string(ndir.join("config.json")).unwrap();
    for (from, to, want) in [
        ("\"M-*-\"", "\"M-*\"", "hybrid_override_pattern"),
        (
            "\"n_groups\": 1",
            "\"n_groups\": 1, \"num_experts_per_tok\": 2",
            "layers of M, * and E",
        ),
    ] {
        std::fs::write(ndir.join("config.json"), cfg.replace(from, to)).unwrap();
        let e = convert_hf(&ndir, &out, &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    let nm = cases.iter().find(|c| c.name == "nemotron-h-moe").unwrap();
    let mdir = work.join("nhm");
    convert_inputs::write_case(nm, &mdir, &smollm, &gemma);
    assert_eq!(
        convert_hf(&mdir, &out, &opts).unwrap().arch,
        "nemotron_h_moe"
    );
    let cfg = std::fs::read_to_string(mdir.join("config.json")).unwrap();
    for (extra, want) in [
        ("\"moe_latent_size\": 32", "fc1_latent_proj"),
        ("\"num_nextn_predict_layers\": 1", "mtp.layers"),
        (
            "\"num_nextn_predict_layers\": 2",
            "2 multi-token-prediction layers",
        ),
    ] {
        let c = cfg.replacen("\"n_groups\": 1", &format!("\"n_groups\": 1, {extra}"), 1);
        std::fs::write(mdir.join("config.json"), c).unwrap();
        let e = convert_hf(&mdir, &out, &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }

    // DeciLM: block_configs not a list, or a vocabulary size other than Llama 3's with a BPE
    // tokenizer.json.
    let dc = cases.iter().find(|c| c.name == "deci").unwrap();
    let ddir = work.join("deci");
    convert_inputs::write_case(dc, &ddir, &smollm, &gemma);
    let cfg = std::fs::read_to_string(ddir.join("config.json")).unwrap();
    for (from, to, want) in [
        (
            "\"block_configs\": [",
            "\"block_configs\": 7, \"x\": [",
            "block_configs",
        ),
        // Another vocabulary size: DeciLM-7B's `LlamaHfVocab` reading, not SmolLM2's BPE.
        (
            "\"vocab_size\": 128256",
            "\"vocab_size\": 49152",
            "SentencePiece-style",
        ),
    ] {
        assert!(cfg.contains(from), "{from}");
        std::fs::write(ddir.join("config.json"), cfg.replace(from, to)).unwrap();
        let e = convert_hf(&ddir, &out, &opts).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }

    // InternLM2 with an added_tokens.json (llama.cpp appends it past the embedding: refused).
    let il = cases.iter().find(|c| c.name == "internlm2").unwrap();
    let idir = work.join("il");
    convert_inputs::write_case(il, &idir, &smollm, &gemma);
    convert_hf(&idir, &out, &opts).unwrap();
    std::fs::write(idir.join("added_tokens.json"), "{\"<|extra|>\": 262144}").unwrap();
    let e = convert_hf(&idir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("added_tokens.json"), "{e}");
    std::fs::remove_dir_all(&work).ok();
}

#[test]
fn experts_that_do_not_match_the_config_are_refused() {
    let Some((smollm, gemma)) = tokenizer_sources() else {
        return;
    };
    let work = temp("moe");
    let cases = convert_inputs::cases();
    let moe = cases.iter().find(|c| c.name == "qwen3moe").unwrap();
    let dir = work.join("m");
    convert_inputs::write_case(moe, &dir, &smollm, &gemma);
    let out = work.join("out.gguf");
    let opts = ConvertOptions::new(OutType::F16);
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    assert!(cfg.contains("\"num_experts\": 4"), "{cfg}");

    // More experts configured than the checkpoint has: the layer never completes.
    std::fs::write(
        dir.join("config.json"),
        cfg.replace("\"num_experts\": 4", "\"num_experts\": 5"),
    )
    .unwrap();
    let e = convert_hf(&dir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("12 of its 15 expert tensors"), "{e}");

    // Fewer: an expert index past the count.
    std::fs::write(
        dir.join("config.json"),
        cfg.replace("\"num_experts\": 4", "\"num_experts\": 3"),
    )
    .unwrap();
    let e = convert_hf(&dir, &out, &opts).unwrap_err().to_string();
    assert!(e.contains("expert 3 of a model with 3 experts"), "{e}");
    assert!(!out.exists() && !out.with_extension("gguf.partial").exists());

    // As configured, the experts stack into one tensor per projection and layer.
    std::fs::write(dir.join("config.json"), &cfg).unwrap();
    convert_hf(&dir, &out, &opts).unwrap();
    let f = GgufFile::open(&out).unwrap();
    let t = f.tensor_info("blk.1.ffn_down_exps.weight").unwrap();
    assert_eq!(t.dims(), [48, 64, 4]);
    let r = f.tensor_info("blk.0.ffn_gate_inp.weight").unwrap();
    assert_eq!(r.ggml_type(), kestrel_gguf::GgmlType::F32);
    std::fs::remove_dir_all(&work).ok();
}
