"""The config checks flag combinations that are each valid but do not work together, naming the variable."""

from __future__ import annotations

from hsi_dagster.cli.config_findings import Finding, check_config
from hsi_dagster.llm.gguf import read_metadata
from hsi_dagster.llm.model_files import bundled_smollm2_path
from hsi_dagster.settings import load_settings
from tests.support.gguf_fixtures import nemotron_q4km_like

BASE = {"MODEL_PATH": "/models/m.gguf", "PARALLEL": 2}


def findings(meta=None, **overrides) -> dict[str, Finding]:
    settings = load_settings("/nonexistent.env", **{**BASE, **overrides})
    result = check_config(settings, meta)
    most_severe: dict[str, Finding] = {}
    for finding in result:  # errors come first
        most_severe.setdefault(finding.variable, finding)
    return most_severe


def test_consistent_defaults_have_no_findings():
    assert findings() == {}
    # on the hybrid model the only remark is that the default CACHE_REUSE=256 cannot shift its KV cache
    assert [(f.level, f.variable) for f in findings(nemotron_q4km_like()).values()] == [("info", "CACHE_REUSE")]


def test_per_slot_context_must_hold_prompt_and_output():
    # 7168 / 2 = 3584 per slot - 1536 output - 256 margin = 1792 tokens: below 2 x the minimal prompt
    tight = findings(CTX_SIZE=7168)["CTX_SIZE"]
    assert tight.level == "warning" and "1792 prompt tokens" in tight.message
    # 8192 / 2: 2304 tokens hold a rich batch only with its evidence cut to counts (issue #15 item 10)
    assert findings(CTX_SIZE=8192)["CTX_SIZE"].level == "warning"
    assert "CTX_SIZE" not in findings(CTX_SIZE=12288)
    broken = findings(CTX_SIZE=7168, PROMPT_SAFETY_MARGIN_TOKENS=1600)["CTX_SIZE"]
    assert broken.level == "error"


def test_slot_beyond_the_training_context_is_flagged():
    meta = read_metadata(bundled_smollm2_path())
    assert "training context (8192)" in findings(meta)["CTX_SIZE"].message  # 16384 per slot


def test_kv_quantization_on_a_hybrid_model_is_a_warning_with_the_saving():
    meta = nemotron_q4km_like()
    finding = findings(meta, CACHE_TYPE_K="q8_0", CACHE_TYPE_V="q8_0")["CACHE_TYPE_K"]
    # 32768 cells x (6144 - 3264) bytes = 90 MiB
    assert (
        finding.level == "warning"
        and "saves only 90 MiB" in finding.message
        and "95 MiB of f32 recurrent state" in finding.message
    )
    assert findings(None, CACHE_TYPE_K="q8_0")["CACHE_TYPE_K"].level == "info"
    smollm2 = read_metadata(bundled_smollm2_path())
    assert "CACHE_TYPE_K" not in findings(smollm2, CACHE_TYPE_K="q8_0", CTX_SIZE=16384)  # pays off on a dense model


def test_quantized_v_cache_without_flash_attention_is_an_error():
    finding = findings(CACHE_TYPE_V="q4_0", FLASH_ATTENTION=False)["CACHE_TYPE_V"]
    assert finding.level == "error" and "FLASH_ATTENTION=true" in finding.message


def test_draft_model_on_a_hybrid_model_is_an_error():
    assert findings(nemotron_q4km_like(), DRAFT_MODEL_PATH="/models/d.gguf")["DRAFT_MODEL_PATH"].level == "error"
    assert findings(None, DRAFT_MODEL_PATH="/models/d.gguf")["DRAFT_MODEL_PATH"].level == "warning"


def test_n_cpu_moe_with_override_tensor_is_an_error():
    result = findings(N_CPU_MOE=4, OVERRIDE_TENSOR="exps=CPU")
    assert result["N_CPU_MOE"].level == "error" and "OVERRIDE_TENSOR" in result["N_CPU_MOE"].message
    assert findings(OVERRIDE_TENSOR="exps")["OVERRIDE_TENSOR"].level == "error"


def test_model_dependent_hints():
    smollm2 = read_metadata(bundled_smollm2_path())
    assert findings(smollm2, N_CPU_MOE=4, CTX_SIZE=16384)["N_CPU_MOE"].level == "warning"  # no experts
    assert findings(nemotron_q4km_like(), CACHE_REUSE=256)["CACHE_REUSE"].level == "info"
    assert "CACHE_REUSE" not in findings(nemotron_q4km_like(), CACHE_REUSE=0)
    assert "CACHE_REUSE" not in findings(smollm2, CACHE_REUSE=256, CTX_SIZE=16384)


def test_gpu_layers_beyond_the_model_is_the_same_as_all():
    smollm2 = read_metadata(bundled_smollm2_path())
    finding = findings(smollm2, GPU_LAYERS="40", CTX_SIZE=16384)["GPU_LAYERS"]
    assert finding.level == "info" and "more than the model's 30 layers" in finding.message
    assert "GPU_LAYERS" not in findings(smollm2, GPU_LAYERS="31", CTX_SIZE=16384)  # 30 layers + the output layer


def test_errors_are_what_the_llama_server_options_refuse():
    """The refusals come from LlamaServerOptions.problems (one place decides them), named by variable."""
    from hsi_dagster.llm.options import LlamaServerOptions

    settings = load_settings("/nonexistent.env", **{**BASE, "CACHE_TYPE_V": "q4_0", "FLASH_ATTENTION": False})
    errors = [(f.variable, f.message) for f in check_config(settings) if f.level == "error"]
    problems = LlamaServerOptions.from_settings(settings).problems()
    assert errors == [(p.variable, p.detail) for p in problems] and errors


def test_a_bad_override_tensor_is_reported_not_raised_by_the_model_checks():
    result = findings(nemotron_q4km_like(), OVERRIDE_TENSOR="exps", CACHE_TYPE_K="q8_0")
    assert result["OVERRIDE_TENSOR"].level == "error" and result["CACHE_TYPE_K"].level == "warning"


def test_public_host_without_api_key_is_flagged():
    assert findings(LLM_HOST="0.0.0.0")["LLAMA_API_KEY"].level == "warning"
    assert "LLAMA_API_KEY" not in findings(LLM_HOST="0.0.0.0", LLAMA_API_KEY="k")


def test_errors_come_first():
    settings = load_settings(
        "/nonexistent.env", **{**BASE, "LLM_HOST": "0.0.0.0", "CACHE_TYPE_V": "q8_0", "FLASH_ATTENTION": False}
    )
    result = check_config(settings)
    assert {f.level for f in result} == {"error", "warning", "info"}
    assert [f.level for f in result] == sorted((f.level for f in result), key=["error", "warning", "info"].index)


def test_the_prompt_floor_against_the_budget():
    """Issue #15 item 10: which settings leave a batch unassessable (its floor does not fit) or degraded."""
    error = findings(CTX_SIZE=6144)["CTX_SIZE"]  # 3072 - 1536 - 256 = 1280 served tokens: below the floor
    assert error.level == "error" and "cannot be assessed" in error.message
    assert "= 3072 - 1536 - 256 = 1280" in error.message and "raise CTX_SIZE to at least" in error.message
    needed = int(error.message.split("raise CTX_SIZE to at least ")[1].split()[0])
    assert findings(CTX_SIZE=needed)["CTX_SIZE"].level == "warning"  # the floor fits: assessed, degraded
    assert findings(CTX_SIZE=needed - 2)["CTX_SIZE"].level == "error"
    # a long output reserve is the same as a small context
    assert findings(CTX_SIZE=8192, NEMOTRON_MAX_OUTPUT_TOKENS=2500)["CTX_SIZE"].level == "error"
    degraded = findings(CTX_SIZE=8192)["CTX_SIZE"]
    assert "florence_lines" in degraded.message and "still assessed" in degraded.message


def test_the_floor_is_taken_on_the_longest_camera_profile(tmp_path):
    profiles = tmp_path / "cameras.yaml"
    note = "the side gate is used by the gardener on weekday mornings and by the residents at weekends"
    notes = "\n".join(f"      - note {i}, {note}" for i in range(20))
    profiles.write_text(
        f"cameras:\n  gate:\n    description: side gate\n    notes:\n{notes}\n  porch:\n    description: x\n"
    )
    plain = findings(CTX_SIZE=7000)["CTX_SIZE"]
    long_profile = findings(CTX_SIZE=7000, CAMERA_CONTEXT_PATH=str(profiles))["CTX_SIZE"]
    assert plain.level == "warning" and long_profile.level == "error" and "'gate'" in long_profile.message
    profiles.write_text("cameras:\n  gate:\n    notes:\n      - a: b\n")
    invalid = findings(CTX_SIZE=7000, CAMERA_CONTEXT_PATH=str(profiles))["CAMERA_CONTEXT_PATH"]
    assert invalid.level == "error" and "camera 'gate'" in invalid.message  # every batch of it would fail


def test_an_unknown_zone_in_a_camera_profile_is_an_error_naming_camera_and_zone(tmp_path):
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text("cameras:\n  back:\n    zones: [patio, lawn]\n    entry_zones: [patio, back_door]\n")
    found = findings(CAMERA_CONTEXT_PATH=str(profiles))["CAMERA_CONTEXT_PATH"]
    assert found.level == "error"
    assert "camera 'back'" in found.message and "'back_door'" in found.message and "entry_zones" in found.message
    profiles.write_text("cameras:\n  back:\n    zones: [patio, lawn]\n    entry_zones: [patio]\n")
    assert findings(CAMERA_CONTEXT_PATH=str(profiles)).get("CAMERA_CONTEXT_PATH") is None or (
        findings(CAMERA_CONTEXT_PATH=str(profiles))["CAMERA_CONTEXT_PATH"].level != "error"
    )


def test_cameras_without_a_time_zone_are_named_for_history(tmp_path):
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text("cameras:\n  porch: {timezone: Europe/Paris}\n  garage: {}\n  back_door: {description: rear}\n")
    found = findings(CAMERA_CONTEXT_PATH=str(profiles))["CAMERA_CONTEXT_PATH"]
    assert found.level == "warning" and "without a timezone: back_door, garage;" in found.message
    assert "CAMERA_CONTEXT_PATH" not in findings(CAMERA_CONTEXT_PATH=str(profiles), HISTORY_ENABLED=False)
    assert findings(HISTORY_DAYS=5, HISTORY_MIN_DAYS=7)["HISTORY_MIN_DAYS"].level == "error"
