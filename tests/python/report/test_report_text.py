"""Terminal rendering (`print(report)`): a real CPU loop, and GPU sections with chosen values."""

from __future__ import annotations

import re

from report_samples import cpu_report, gpu_report

import gpuprof

ANSI = re.compile(r"\x1b\[")


def test_cpu_report_shows_steps_and_categories_without_colour_when_not_a_tty():
    r = cpu_report()
    text = r.to_text(color=False)
    assert not ANSI.search(text)
    assert f"{len(r.steps)} steps, mean step time {r.average['total_us'] / 1000:.3f} ms" in text
    # The loop's Dataset sleeps, so DataLoader time is recorded and its share is in the legend.
    assert f"DataLoader {r.average['dataloader_pct']:.1f}%" in text
    assert "DataLoader us" in text and "CPU Exec us" in text
    # A CPU report has no GPU sections: nothing about them is printed.
    assert "GPU summary" not in text and "GPU kernels" not in text
    # Advice: the sample's sleepy DataLoader is advised. Its 16-32-4 MLP at batch 8 is a small batch
    # (small_batch, where the typical step's Python share says so: not when two intra-op threads
    # on a loaded machine make each product take milliseconds), and a CPU's estimated peak may
    # call its FLOPs low (low_mfu); nothing else.
    rules = [a["rule"] for a in r.advice]
    assert "dataloader" in rules and set(rules) <= {"dataloader", "small_batch", "low_mfu"}
    assert f"Top recommendations ({len(rules)} of {len(rules)})" in text
    assert "fix: DataLoader(..., num_workers=" in text
    assert str(r).startswith("gpuprof step breakdown")  # print(report) uses this renderer


def test_colour_when_asked():
    assert ANSI.search(cpu_report().to_text(color=True))


def test_gpu_summary_top_kernels_and_ranked_advice():
    text = gpu_report().to_text(color=False, width=120)
    assert "GPU summary" in text and "GPU 0 NVIDIA H100 80GB HBM3" in text
    assert re.search(r"GPU utilization\s+71\.5%", text)
    assert re.search(r"Peak allocated\s+30\.0 GiB", text)
    # 7 kernels: the top 5 by total time (700..300 us) are shown, heaviest first; 200 and 100 are not.
    assert "GPU kernels (top 5 of 7)" in text
    kernel_block = text.split("GPU kernels")[1].split("Operators")[0]
    order = [kernel_block.index(n) for n in ("ampere_sgemm_128x64_nn", "kernel_1", "kernel_4")]
    assert order == sorted(order)
    assert "kernel_5" not in kernel_block and "kernel_6" not in kernel_block
    # Advice ranked by its bound on the saving: dataloader (73%) before mixed_precision (20%).
    advice = text.split("Top recommendations")[1]
    assert advice.index("The input pipeline starves the GPU") < advice.index("Use mixed precision")
    assert "up to 73% of the step, confidence high" in advice
    assert "fix: DataLoader(..., num_workers=8, persistent_workers=True)" in advice


def test_names_are_never_read_as_rich_markup():
    d = gpu_report().to_dict()
    d["kernels"][-1]["name"] = "[bold red]not markup[/bold red]"  # the heaviest: shown
    text = gpuprof.Report.from_dict(d).to_text(color=False, width=140)
    assert "[bold red]not markup[/bold red]" in text


def test_long_spans_show_first_and_last_steps():
    d = cpu_report().to_dict()
    proto = d["steps"][0]
    d["steps"] = [dict(proto, step=i) for i in range(50)]
    text = gpuprof.Report.from_dict(d).to_text(color=False)
    rows = [line.split()[0] for line in text.splitlines() if line.strip()]
    assert "0" in rows and "49" in rows and "…" in rows and "25" not in rows


def test_a_report_without_steps_renders_everywhere():
    from gpuprof.analysis import average

    d = cpu_report().to_dict()
    d["steps"], d["average"] = [], average([])
    r = gpuprof.Report.from_dict(d)
    assert "No complete step was recorded." in r.to_text(color=False)
    assert "No complete step was recorded." in r.to_markdown()
    assert "No complete step was recorded" in r.to_html() and 'id="step-chart"' not in r.to_html()


def test_the_input_pipeline_of_a_loader_without_workers_is_said_once_and_in_the_main_process():
    """num_workers=0 (the sample's DataLoader): every stage ran in the training process, and the
    batch's stages are one line under the bar, not a legend and then the same numbers again."""
    r = cpu_report()
    text = r.to_text(color=False, width=120)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Input pipeline:"))
    end = next(i for i in range(at, len(lines)) if "Little's law" in lines[i])
    stage_lines = [line for line in lines[at:end] if "load " in line and " ms" in line]
    assert len(stage_lines) == 1 and stage_lines[0].startswith("one batch: ■ load ")
    assert text.count("one batch") == 1
    html = r.to_html()
    legend = html[html.index('id="pipeline-bar"') :]
    legend = legend[legend.index('class="legend"') : legend.index("</div>", legend.index('class="legend"'))]
    assert "(main process)" in legend and "(worker)" not in legend
    assert "| load | main process |" in r.to_markdown()
