"""The pages in a real headless Chromium: the numbers on the page are the CLI's, the plan's
equilibrium is marked on its curve, a bad input shows the CLI's line, and a screenshot of each
page is written to artifacts/screenshots."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qsl, urlparse

import pytest

from .conftest import cli, flags, screenshot

pytest.importorskip("starlette")
pytest.importorskip("selenium")

GiB = 2**30


def wait(d, test, timeout=60):
    """Until ``test`` holds and the page has settled (no request in flight, no change waiting)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(d, timeout, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda drv: drv.execute_script("return window.gpuplanBusy === 0") and test(drv))


def css(d, sel):
    from selenium.webdriver.common.by import By

    return d.find_elements(By.CSS_SELECTOR, sel)


def visit(d, url):
    d.get_log("browser")  # what an earlier page logged is not this page's
    d.get(url)


def no_console_errors(d):
    bad = [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert bad == []


def type_into(d, name, text):
    (field,) = css(d, f'[name="{name}"]')
    if field.tag_name == "select":
        from selenium.webdriver.support.ui import Select

        Select(field).select_by_value(text)
    else:
        field.clear()
        field.send_keys(text)


def url_body(d) -> dict:
    return dict(parse_qsl(urlparse(d.current_url).query))


def lookup(obj, dotted):
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def test_size_page_numbers_are_the_cli_numbers(served, browser):
    d = browser
    visit(d, served.url + "/")
    wait(d, lambda drv: css(drv, '[data-key="memory.total"]'))
    type_into(d, "model", "llama-3.1-70b")
    type_into(d, "gpu", "h100-sxm")
    type_into(d, "gpus", "64")
    type_into(d, "tp", "8")
    type_into(d, "zero", "1")
    wait(d, lambda drv: "Llama-3.1-70B: " in drv.find_element("css selector", ".facts dd").text
         and "tp 8" in css(drv, '[data-key="layout"]')[0].text and "64×" in drv.page_source)
    body = url_body(d)  # the page's state lives in its address: the same scenario, as flags
    assert body == {"model": "llama-3.1-70b", "gpu": "h100-sxm", "gpus": "64", "tp": "8", "zero": "1",
                    "tokens": "1T", "global_batch": "1024"}
    rc, out, _ = cli("evaluate", *flags(body), "--json")
    assert rc == 0
    est = json.loads(out)
    shown = {e.get_attribute("data-key"): e for e in css(d, "[data-key][data-value]")
             if e.get_attribute("data-value") not in ("", None) and e.get_attribute("data-key") != "layout"}
    assert {"memory.total", "memory.capacity", "time.step_s", "time.tokens_per_s", "time.mfu", "time.train_s",
            "time.gpu_hours", "cost.usd"} <= set(shown)
    for key, el in shown.items():
        want = lookup(est, key)
        got = el.get_attribute("data-value")
        if isinstance(want, bool):
            assert got == str(want).lower(), key
        elif isinstance(want, int | float):
            assert float(got) == pytest.approx(want, rel=1e-15, abs=0), key
        else:
            assert got == want, key
    # and the words are these numbers, formatted
    assert shown["memory.total"].text.endswith(f"{est['memory']['total'] / GiB:.1f} GiB")
    assert shown["time.mfu"].text.endswith(f"{est['time']['mfu'] * 100:.1f}%")
    lo, hi = est["cost"]["interval"]["usd"]["p10"], est["cost"]["interval"]["usd"]["p90"]
    assert shown["cost.usd"].text.endswith(f"${round(est['cost']['usd']):,} (80%: ${round(lo):,}–${round(hi):,})")
    no_console_errors(d)
    screenshot(d, "size")


def test_best_layout_button_fills_the_form_with_the_plans_best(served, browser):
    d = browser
    # a 1B, whose completed layout (ZeRO 0, micro-batch 2) is not the plan's best (ZeRO 1, micro-batch 4)
    visit(d, served.url + "/?model=llama-3.2-1b&gpu=h100-sxm&gpus=16&tokens=1T&global_batch=1024")
    wait(d, lambda drv: css(drv, '[data-key="time.step_s"]'))
    before = css(d, '[data-key="time.step_s"]')[0].get_attribute("data-value")
    next(b for b in css(d, "button") if b.text == "Best layout for this count").click()
    wait(d, lambda drv: css(drv, '[data-key="time.step_s"]')
         and css(drv, '[data-key="time.step_s"]')[0].get_attribute("data-value") != before)
    time.sleep(0.5)
    _, out, _ = cli("plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "16", "--max-gpus", "16",
                    "--tokens", "1T", "--global-batch", "1024", "--json")
    best = next(p["best"] for p in json.loads(out)["scaling"] if p["gpus"] == 16)
    step = float(css(d, '[data-key="time.step_s"]')[0].get_attribute("data-value"))
    assert step == pytest.approx(best["time"]["step_s"], rel=1e-12)


def test_plan_marks_the_equilibrium_on_the_curve(served, browser):
    d = browser
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tokens": "1T", "global_batch": "1024", "max_gpus": "1024"}
    visit(d, served.url + "/plan?" + "&".join(f"{k}={v}" for k, v in q.items()))
    wait(d, lambda drv: css(drv, 'g[data-mark="equilibrium"]'))
    _, out, _ = cli("plan", *flags(q), "--json")
    res = json.loads(out)
    (eq,) = css(d, 'g[data-mark="equilibrium"]')
    assert int(eq.get_attribute("data-gpus")) == res["equilibrium"]["gpus"]
    assert eq.text == f"equilibrium: {res['equilibrium']['gpus']} GPUs"
    (small,) = css(d, 'g[data-mark="smallest"]')
    assert int(small.get_attribute("data-gpus")) == res["scaling"][0]["gpus"] == res["min_gpus"]["h100-sxm"]
    assert css(d, 'line[data-mark="node"]')  # the node boundary (8 GPUs per node) is on the curve
    assert css(d, '[data-key="best.cost.usd"]')[0].get_attribute("data-value") == repr(res["best"]["cost"]["usd"])
    # the recommendation rule is stated on the page as in the CLI's answer (the equilibrium, no deadline)
    (why,) = css(d, '[data-key="recommendation.rule"]')
    assert why.get_attribute("data-value") == res["recommendation"]["rule"] == "equilibrium"
    assert why.text == f"why this one: {res['recommendation']['text']}"
    assert res["best"]["scenario"]["hardware"]["gpus"] == res["equilibrium"]["gpus"]
    points = css(d, "svg.scatter circle.pt")
    assert len(points) == len(res["pareto"])
    points[0].click()
    p = res["pareto"][0]
    wait(d, lambda drv: f"{p['gpus']}× {p['gpu']}" in drv.find_element("css selector", ".detail").text)
    rows = css(d, "table.cands tr")
    assert len(rows) == 1 + len(res["candidates"])
    no_console_errors(d)
    screenshot(d, "plan")


def test_the_plan_page_prices_where_the_user_buys(served, browser):
    # issue 24: region and pricing filter the price catalogue; the page names the row, as the CLI does
    d = browser
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": "8", "tokens": "10B", "region": "eu",
         "pricing": "spot"}
    visit(d, served.url + "/plan?" + "&".join(f"{k}={v}" for k, v in q.items()))
    wait(d, lambda drv: css(drv, '[data-key="best.cost.market.provider"]'))
    _, out, _ = cli("plan", *flags(q), "--json")
    m = json.loads(out)["best"]["cost"]["market"]
    (el,) = css(d, '[data-key="best.cost.market.provider"]')
    from gpuplan.report.text import market_line

    assert el.get_attribute("data-value") == m["provider"] and el.text == market_line(m)
    no_console_errors(d)


def test_the_plan_page_plans_as_you_type(served, browser):
    # no button press: changing a field re-plans, and the page shows the plan of what the fields now say
    d = browser
    visit(d, served.url + "/plan?model=llama-3.1-8b&gpu=h100-sxm&tokens=1T&global_batch=1024&max_gpus=64")
    wait(d, lambda drv: css(drv, '[data-key="best.scenario.hardware.gpus"]'))
    type_into(d, "max_gpus", "16")
    type_into(d, "model", "qwen2.5-7b")
    wait(d, lambda drv: url_body(drv).get("model") == "qwen2.5-7b"
         and css(drv, '[data-key="best.cost.usd"]'))
    body = url_body(d)
    _, out, _ = cli("plan", *flags(body), "--json")
    res = json.loads(out)
    got = css(d, '[data-key="best.cost.usd"]')[0].get_attribute("data-value")
    assert got == repr(res["best"]["cost"]["usd"]) and res["best"]["scenario"]["hardware"]["gpus"] <= 16
    assert "planned in" in css(d, ".status")[0].text
    no_console_errors(d)


@pytest.mark.parametrize("field,value", [("gpus", "0"), ("model", "llama-3.1-7b"), ("tp", "3")])
def test_a_bad_input_shows_the_cli_message(served, browser, field, value):
    d = browser
    visit(d, served.url + "/?model=llama-3.1-8b&gpu=h100-sxm&gpus=8")
    wait(d, lambda drv: css(drv, '[data-key="memory.total"]'))
    type_into(d, field, value)
    wait(d, lambda drv: css(drv, ".error .msg"))
    body = url_body(d)
    rc, _, err = cli("evaluate", *flags(body), "--json")
    assert rc == 2
    assert "gpuplan: error: " + css(d, ".error .msg")[0].text == err.strip()
    if field == "gpus":
        screenshot(d, "size-error")


def test_compare_puts_configurations_side_by_side(served, browser):
    d = browser
    visit(d, served.url + "/compare")
    wait(d, lambda drv: css(drv, "table.compare td.best"))
    heads = [th.text for th in css(d, "table.compare tr:first-child th")]
    assert heads == ["", "configuration 1", "configuration 2"]
    assert "1.scale_out=eth-10g" in d.current_url and "2.gpus=32" in d.current_url
    assert not css(d, ".error")
    no_console_errors(d)
    screenshot(d, "compare")


def test_export_shows_the_cli_config(served, browser):
    d = browser
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": "16", "tp": "2", "pp": "1", "zero": "3", "to": "deepspeed"}
    visit(d, served.url + "/export?" + "&".join(f"{k}={v}" for k, v in q.items()))
    wait(d, lambda drv: css(drv, 'pre.code[data-filename="ds_config.json"]'))
    _, out, _ = cli("export", *flags(q), "--json")
    assert css(d, "pre.code")[0].text == json.loads(out)["text"].rstrip("\n")
    no_console_errors(d)
    screenshot(d, "export")


def test_report_download_is_the_cli_report(served, browser, tmp_path):
    d = browser
    d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)})
    q = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": "8", "zero": "3", "tokens": "1T", "global_batch": "512"}
    visit(d, served.url + "/?" + "&".join(f"{k}={v}" for k, v in q.items()))
    wait(d, lambda drv: css(drv, '[data-key="memory.total"]'))
    next(b for b in css(d, "button") if b.text == "Report (.md)").click()
    got = tmp_path / "gpuplan-evaluate.md"
    wait(d, lambda drv: got.exists() and got.stat().st_size > 0, timeout=60)
    want = tmp_path / "cli.md"
    cli("evaluate", *flags(q), "--report", str(want))
    assert got.read_text() == want.read_text()


def test_what_was_assumed_is_shown(served, browser):
    d = browser
    visit(d, served.url + "/?model=%7Bparams%3A%207e9%7D&gpu=h100-sxm&gpus=8&zero=3")
    wait(d, lambda drv: css(drv, ".assumed li"))
    body = url_body(d)
    assert body["model"] == "{params: 7e9}"
    est = json.loads(cli("evaluate", *flags(body), "--json")[1])
    shown = [li.text for li in css(d, ".assumed li")]
    assert set(est["model"]["assumed"]) <= set(shown)  # with any other "assumed" the answer carries
    assert any(x.startswith("shape derived from params=7,000,000,000") for x in shown)
