"""The JSON API against the command line: the same answers, byte for byte, and the same one-line
errors (HTTP 422); malformed bodies, oversize bodies and file paths refused; never a 500."""

from __future__ import annotations

import json
import string

import pytest

from .conftest import ask, cli, flags

pytest.importorskip("starlette")

EVAL = {"model": "llama-3.1-70b", "gpu": "h100-sxm", "gpus": 64, "tp": 8, "zero": 1, "tokens": "1T",
        "global_batch": 1024}


def test_evaluate_is_the_cli_answer_byte_for_byte(served):
    r = ask(served, "/api/evaluate", EVAL)
    rc, out, _ = cli("evaluate", *flags(EVAL), "--json")
    assert (r.status, rc) == (200, 0)
    assert r.headers["Content-Type"] == "application/json"
    assert r.text + "\n" == out


def test_scenario_sections_and_flags_are_the_same_question(served):
    sections = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "gpus": 64},
                "training": {"tokens": "1T", "global_batch": 1024}, "layout": {"tp": 8, "zero": 1}}
    assert ask(served, "/api/evaluate", sections).text == ask(served, "/api/evaluate", EVAL).text
    # flags win over the sections, as on the command line
    mixed = ask(served, "/api/evaluate", {**sections, "gpus": 128}).json()
    assert mixed["scenario"]["hardware"]["gpus"] == 128


def test_a_list_gives_a_list_and_a_bad_item_its_own_error(served, tmp_path):
    items = [{"model": "llama-3.1-8b", "gpu": "h100-sxm"}, {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 0}]
    r = ask(served, "/api/evaluate", {"scenarios": items, "seq_len": 8192})
    assert r.status == 200
    first, second = r.json()
    assert first["scenario"]["training"]["seq_len"] == 8192
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 0}}]))
    _, out, _ = cli("evaluate", str(path), "--json")
    assert second == json.loads(out)[0] == {"error": "hardware.gpus must be positive, got 0"}


def test_fit_plan_export_answer_as_the_cli(served):
    fit = {"model": "llama-3.1-70b", "gpu": "h100-sxm,h200"}
    r = ask(served, "/api/fit", fit)
    assert r.status == 200 and r.text + "\n" == cli("fit", *flags(fit), "--json")[1]
    assert [x["gpu"] for x in r.json()] == ["h100-sxm", "h200"]  # one answer per type
    assert all(isinstance(x["min_gpus"], int) and x["min_gpus"] >= 8 for x in r.json())  # 70B: > 1 TB of state

    plan = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tokens": "1T", "max_gpus": 64, "top": 2,
            "objective": "cost", "deadline": "60d"}
    r = ask(served, "/api/plan", plan)
    assert r.status == 200 and r.text + "\n" == cli("plan", *flags(plan), "--json")[1]
    assert len(r.json()["candidates"]) == 2

    ex = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 16, "tp": 2, "pp": 1, "zero": 3, "to": "deepspeed"}
    r = ask(served, "/api/export", ex)
    assert r.status == 200 and r.text + "\n" == cli("export", *flags(ex), "--json")[1]
    assert r.json()["filename"] == "ds_config.json" and r.json()["written_to"] is None


def test_a_fixed_count_beyond_the_open_ceiling_is_answered_as_the_cli_answers_it(served):
    # the 16,384 ceiling bounds an open count only: a scenario fixed at 32,768 GPUs is planned there
    plan = {"model": "llama-3.1-405b", "gpu": "h100-sxm", "gpus": 32768, "tp": 8, "pp": 16, "tokens": "15T",
            "global_batch": 4096}
    r = ask(served, "/api/plan", plan)
    rc, out, _ = cli("plan", *flags(plan), "--json")
    assert (r.status, rc) == (200, 0)
    assert r.text + "\n" == out
    assert r.json()["best"]["scenario"]["hardware"]["gpus"] == 32768


def test_plan_options_take_units_as_the_cli_does(served):
    plan = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tokens": "1T", "max_gpus": "64", "deadline": "14d",
            "budget": "$500k", "threshold": "80%"}
    r = ask(served, "/api/plan", plan)
    assert r.status == 200 and r.text + "\n" == cli("plan", *flags(plan), "--json")[1]


def test_report_is_the_cli_report(served, tmp_path):
    body = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 8, "zero": 3, "tokens": "1T", "global_batch": 512}
    md = tmp_path / "r.md"
    assert cli("evaluate", *flags(body), "--json", "--report", str(md))[0] == 0
    r = ask(served, "/api/report", {"kind": "evaluate", "format": "md", **body})
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/markdown")
    assert 'filename="gpuplan-report.md"' in r.headers["Content-Disposition"]
    assert r.text == md.read_text()
    page = ask(served, "/api/report", {"kind": "plan", "format": "html", **body, "max_gpus": 16})
    assert page.status == 200 and page.text.startswith("<!DOCTYPE html>") and "Training plan" in page.text


@pytest.mark.parametrize("name", ["gpus", "models", "fabrics"])
def test_catalogues_are_the_cli_catalogues(served, name):
    r = ask(served, f"/api/{name}")
    assert r.status == 200 and r.text + "\n" == cli(name, "--json")[1]
    if name == "models":  # the page's search takes aliases
        assert "llama3.1-70b" in next(m for m in r.json() if m["id"] == "llama-3.1-70b")["aliases"]


def test_the_pages_precision_menu_offers_the_4_bit_recipes_and_the_api_reads_them(served):
    from gpuplan.serve.app import _choices  # the menus' values

    assert {"nvfp4", "mxfp4"} <= set(_choices()["precision"])
    body = {"model": "llama-3.1-8b", "gpu": "b200", "gpus": 8, "precision": "nvfp4", "tokens": "1B"}
    r = ask(served, "/api/evaluate", body)
    assert r.status == 200 and r.json()["scenario"]["training"]["fp8_recipe"] == "nvfp4"
    assert r.text + "\n" == cli("evaluate", *flags(body), "--json")[1]


def test_a_bad_scenario_is_the_cli_line_with_422(served):
    for body in ({"model": "llama-3.1-7b", "gpu": "h100-sxm"}, {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tp": 3},
                 {"model": "llama-3.1-8b", "gpu": "h100-sxm", "precision": "int4"}):
        r = ask(served, "/api/evaluate", body)
        rc, _, err = cli("evaluate", *flags(body), "--json")
        assert (r.status, rc) == (422, 2)
        assert "gpuplan: error: " + r.json()["error"] + "\n" == err


MALFORMED = [b"", b"{", b"[]", b"null", b"5", b'"text"', b"\xff\xfe{}", b'{"model": 5}',
             b'{"model": {"params": -1}, "gpu": "h100-sxm"}', b'{"hardware": "x", "gpu": "h100-sxm"}',
             b'{"gpus": [1, 2]}', b'{"model": "llama-3.1-8b", "gpu": ["h100-sxm"], "gpus": {"a": 1}}',
             b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", "layout": [1]}', b"[" * 100000,
             b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", "seq_len": 1e400}', b'{"__proto__": 1}',
             b'{"scenarios": 5}', b'{"scenarios": [], "gpu": "h100-sxm"}', b'{"scenarios": [{}], "layout": {}}',
             b'{"model": "{params: ", "gpu": "h100-sxm"}', b'{"model": "llama-3.1-8b", "gpu": "{base: }"}']
OPTIONS = [{"objective": "fast"}, {"top": 0}, {"top": 1000}, {"max_gpus": "1e9"}, {"deadline": "soon"},
           {"budget": -5}, {"threshold": "x"}, {"max_gpus": True}, {"to": "jax"}, {"to": 5}]


@pytest.mark.parametrize("path", ["/api/evaluate", "/api/fit", "/api/plan", "/api/export", "/api/report"])
def test_malformed_bodies_get_one_line_never_a_500(served, path):
    for body in MALFORMED:
        r = ask(served, path, body)
        assert r.status == 422, (body[:60], r.text[:300])
        message = r.json()["error"]
        assert message and "\n" not in message and "Traceback" not in message
    for opt in OPTIONS:
        r = ask(served, path, {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_gpus": 64, **opt})
        assert r.status == 422 and "\n" not in r.json()["error"], (opt, r.text[:300])


def test_list_lengths_and_body_size_are_bounded(served):
    r = ask(served, "/api/evaluate", [{"model": "llama-3.1-8b", "gpu": "h100-sxm"}] * 65)
    assert r.status == 422 and r.json()["error"] == "65 scenarios in one request: /api/evaluate takes at most 64"
    big = json.dumps({"model": "llama-3.1-8b", "gpu": "h100-sxm", "name": "x" * 300_000})
    r = ask(served, "/api/evaluate", big)
    assert r.status == 413 and "over 262,144 bytes" in r.json()["error"]
    r = ask(served, "/api/fit", {"model": "llama-3.1-8b", "gpu": ",".join(["h100-sxm"] * 65)})
    assert r.status == 422 and r.json()["error"] == "65 GPU types: at most 64"


@pytest.mark.parametrize("body", [
    {"model": "/etc/hostname"}, {"model": "./config.json"}, {"model": "~/models/x"}, {"model": "config.json"},
    {"model": "C:\\models\\config.json"}, {"model": "llama-3.1-8b", "calibration": "/tmp/runs.sqlite3"},
    {"model": "llama-3.1-8b", "training": {"trace_calibration": "../calibration.json"}}])
def test_a_file_path_is_refused_over_the_web(served, body):
    for path in ("/api/evaluate", "/api/plan", "/api/fit", "/api/export"):
        r = ask(served, path, {"gpu": "h100-sxm", "to": "torchrun", **body} if path == "/api/export"
                else {"gpu": "h100-sxm", **body})
        assert r.status == 422
        assert "this server does not read files named in a request" in r.json()["error"]
        assert "--allow-paths" in r.json()["error"]


def test_allow_paths_reads_the_file(tmp_path):
    from gpuplan.serve.answers import evaluate_answer, split

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
                               "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000}))
    req = split({"model": str(cfg), "gpu": "h100-sxm"}, "evaluate")
    assert evaluate_answer(req, allow_paths=True)["model"]["params"] > 0
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="does not read files"):
        evaluate_answer(req, allow_paths=False)


def test_a_pasted_config_is_read_inline(served):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000}
    r = ask(served, "/api/evaluate", {"model": json.dumps(cfg), "gpu": "h100-sxm"})
    assert r.status == 200
    _, out, _ = cli("evaluate", "--model", json.dumps(cfg), "--gpu", "h100-sxm", "--json")
    assert r.text + "\n" == out


def test_wrong_address_or_method_is_json(served):
    r = ask(served, "/api/nothing")
    assert r.status == 404 and r.json()["error"].startswith("no page or endpoint at /api/nothing")
    r = ask(served, "/api/evaluate")
    assert r.status == 405 and r.json()["error"] == "GET is not allowed on /api/evaluate: see /docs"


def test_openapi_and_docs_describe_every_endpoint(served):
    spec = ask(served, "/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    assert set(spec["paths"]) == {f"/api/{n}" for n in ("evaluate", "fit", "plan", "export", "report", "gpus",
                                                         "models", "fabrics")}
    docs = ask(served, "/docs")
    assert docs.status == 200 and all(p in docs.text for p in spec["paths"])


def test_pages_load_nothing_from_elsewhere(served):
    from pathlib import Path

    import gpuplan.serve

    for page in ("/", "/plan", "/compare", "/export"):
        r = ask(served, page)
        assert r.status == 200 and "default-src 'self'" in r.headers["Content-Security-Policy"]
        for src in [s.split('"')[0] for s in r.text.split('src="')[1:]]:
            assert src.startswith("/static/") and ask(served, src.split("?")[0]).status == 200
    static = Path(gpuplan.serve.__file__).parent / "static"
    for f in static.iterdir():  # no CDN, no font or script fetched from another host (the SVG namespace is a name)
        text = f.read_text().replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, f.name


def test_time_limit_stops_a_plan_with_one_line():
    from gpuplan.serve.pool import compute

    body = json.dumps({"model": "llama-3.1-405b", "gpu": "all", "tokens": "1T"}).encode()
    r = compute("plan", body, False, limit_s=0.01)
    assert r.status == 422
    assert json.loads(r.body)["error"].startswith("the plan took longer than this server's limit of 0.01 s")


def test_a_job_past_its_limit_is_stopped_and_the_pool_goes_on():
    import asyncio

    from gpuplan.serve.pool import Pool

    async def go():
        pool = Pool(workers=1, limit_s=0.05, allow_paths=False)
        pool.grace_s = 0.0
        await pool.warm()
        try:  # an export plans without progress checks: only ending the worker stops it
            body = json.dumps({"model": "llama-3.1-405b", "gpu": "h100-sxm", "to": "megatron"}).encode()
            first = await pool.run("export", body)
            pool.limit_s = 30
            second = await pool.run("evaluate", json.dumps({"model": "llama-3.1-8b", "gpu": "h100-sxm"}).encode())
        finally:
            pool.close()
        return first, second

    first, second = asyncio.run(go())
    assert first.status == 422 and b"took longer" in first.body
    assert second.status == 200 and json.loads(second.body)["scenario"]["hardware"]["gpu"] == "h100-sxm"


def test_random_bodies_never_500(served):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    keys = st.sampled_from(["model", "gpu", "gpus", "tp", "pp", "zero", "seq_len", "tokens", "method", "hardware",
                            "layout", "scenarios", "objective", "top", "to", "micro_batch", "bogus"])
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False),
                     st.text(string.printable, max_size=12), st.sampled_from(["llama-3.1-8b", "h100-sxm", "1T"]))
    value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
                         max_leaves=6)

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(["/api/evaluate", "/api/fit", "/api/export"]), body=st.dictionaries(keys, value))
    def check(path, body):
        r = ask(served, path, body | {"max_gpus": 64} if path != "/api/evaluate" else body)
        assert r.status in (200, 422), (body, r.text[:300])
        if r.status == 422:
            assert "\n" not in r.json()["error"]

    check()


def test_a_search_asked_again_is_answered_from_the_recent_answers(served):
    body = {"model": "llama-3.2-1b", "gpu": "l4", "tokens": "1B", "max_gpus": 8, "top": 1}
    first = ask(served, "/api/plan", body)
    again = ask(served, "/api/plan", json.dumps(dict(reversed(list(body.items()))), indent=3))
    assert first.status == again.status == 200 and first.text == again.text
    assert first.headers.get("X-Gpuplan-Cache") is None and again.headers["X-Gpuplan-Cache"] == "hit"
    # evaluate is never cached: it is computed each time (under a millisecond)
    assert ask(served, "/api/evaluate", EVAL).headers.get("X-Gpuplan-Cache") is None


def test_a_request_to_another_name_is_refused(served):
    # a page elsewhere that points its own name at 127.0.0.1 (DNS rebinding) gets nothing
    r = ask(served, "/api/evaluate", EVAL, headers={"Host": "attacker.example:8000"})
    assert r.status == 421 and "not 'attacker.example'" in r.json()["error"]
    assert ask(served, "/api/gpus", headers={"Host": f"localhost:{served.port}"}).status == 200


def test_the_kernels_menu_reaches_the_answer_as_the_flag_does(served):
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 1, "framework": "hf-trainer", "method": "lora",
         "kernels": "liger", "seq_len": 8192}
    r = ask(served, "/api/evaluate", q)
    assert r.status == 200 and r.text + "\n" == cli("evaluate", *flags(q), "--json")[1]
    assert r.json()["scenario"]["training"]["kernels"] == "liger"
    assert ask(served, "/api/evaluate", {**q, "framework": "torchtitan"}).status == 422  # Liger patches HF models


def test_the_moe_exchange_menu_reaches_the_answer_as_the_flag_does(served):
    q = {"model": "qwen3-30b-a3b", "gpu": "h100-sxm", "gpus": 16, "ep": 8, "moe_dispatcher": "deepep"}
    r = ask(served, "/api/evaluate", q)
    assert r.status == 200 and r.text + "\n" == cli("evaluate", *flags(q), "--json")[1]
    assert r.json()["scenario"]["training"]["moe_dispatcher"] == "deepep"
    assert ask(served, "/api/evaluate", {**q, "moe_dispatcher": "nccl"}).status == 422


def test_the_allocator_menu_reaches_the_answer_as_the_flag_does(served):
    # the form's "expandable_segments" menu: the same answer as --expandable-segments, its reserve in the memory
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 8, "recompute": "full", "expandable_segments": "true"}
    r = ask(served, "/api/evaluate", q)
    assert r.status == 200 and r.text + "\n" == cli("evaluate", *flags(q), "--json")[1]
    on = r.json()
    off = ask(served, "/api/evaluate", {**q, "expandable_segments": "false"}).json()
    assert on["scenario"]["training"]["expandable_segments"] is True
    assert off["memory"]["detail"]["fragmentation"] > on["memory"]["detail"]["fragmentation"]
    mem = on["memory"]
    assert mem["reserved"] - mem["allocated"] == pytest.approx(mem["detail"]["fragmentation"])
