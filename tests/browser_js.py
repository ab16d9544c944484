"""JavaScript the browser test evaluates in JupyterLab's page (`page.evaluate(JS, arg)`).

`window.jupyterapp` is there because the server runs with `--LabApp.expose_app_in_browser`.
"""

from __future__ import annotations

_PANEL = "window.jupyterapp.shell.currentWidget"
_CODE_CELLS = f"{_PANEL}.content.widgets.filter(c => c.model.type === 'code')"

KERNEL_IDLE = f"""() => {{
    const p = window.jupyterapp && {_PANEL};
    const k = p && p.sessionContext && p.sessionContext.session && p.sessionContext.session.kernel;
    return !!k && k.status === 'idle';
}}"""

# Every code cell of the open notebook: execution count and the errors it raised.
CELLS = f"""() => {_CODE_CELLS}.map(c => {{
    const outs = [];
    for (let i = 0; i < c.model.outputs.length; i++) outs.push(c.model.outputs.get(i).toJSON());
    return {{count: c.model.executionCount,
            errors: outs.filter(o => o.output_type === 'error')
                        .map(o => o.ename + ': ' + o.evalue)}};
}})"""

# Run All is over: the kernel is idle and every code cell ran, or one raised (the kernel then
# aborts the cells queued after it, which keep no count).
FINISHED = f"""() => {{
    if (!({KERNEL_IDLE})()) return false;
    const cells = ({CELLS})();
    return cells.every(c => c.count !== null) || cells.some(c => c.errors.length > 0);
}}"""

STDERR = """() => [...document.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
].map(e => e.innerText)"""

# Loaded pictures per figure class of the profiles (memory heat map, categories, cycles, timeline).
PICTURES = """() => Object.fromEntries(
    [...document.querySelectorAll('.ipu-profile figure')].map(f => {
        const img = f.querySelector('img');
        return [f.className, !!img && img.complete && img.naturalWidth > 0];
    }))"""

SCROLL_TOP = f"""() => {{
    const n = {_PANEL}.content.node;
    for (const e of [n, ...n.querySelectorAll('.jp-WindowedPanel-outer')]) e.scrollTop = 0;
}}"""

# From the page's top to the end of the notebook's last cell, scrolled or not.
NOTEBOOK_HEIGHT = f"""() => {{
    const n = {_PANEL}.content.node;
    const inner = [n, ...n.querySelectorAll('.jp-WindowedPanel-outer, .jp-WindowedPanel-viewport')];
    return Math.ceil(n.getBoundingClientRect().top + Math.max(...inner.map(e => e.scrollHeight)));
}}"""

# The live run dashboard's readings.
SAMPLE_RUN = """() => {
    const r = document.querySelector('.ipu-run');
    if (!r) return null;
    const bar = r.querySelector('.ipu-requests .progress-bar');
    const svg = r.querySelector('svg.ipu-throughput');
    const lat = r.querySelector('.ipu-latency');
    const status = r.querySelector('.ipu-status');
    return {bar: bar ? bar.style.width : null, n: svg ? svg.getAttribute('data-n') : null,
            latency: lat ? lat.innerText : null, status: status ? status.innerText : null};
}"""

# A live run dashboard (the widget, not its final HTML) that has drawn a few samples.
RUN_BUSY = """() => {
    const r = document.querySelector('.jp-OutputArea-output .ipu-run.widget-box');
    const status = r && r.querySelector('.ipu-status');
    const svg = r && r.querySelector('svg.ipu-throughput');
    return !!status && status.innerText.trim() === 'running' &&
        Number(svg && svg.getAttribute('data-n')) >= 2;
}"""

OUTPUT_TEXT = f"(i) => {_CODE_CELLS}[i].outputArea.node.innerText"

# Through the UI's commands: a new cell below the last, with `src`, run.
RUN_NEW_CELL = f"""async (src) => {{
    const app = window.jupyterapp;
    const nb = {_PANEL}.content;
    nb.activeCellIndex = nb.widgets.length - 1;
    await app.commands.execute('notebook:insert-cell-below');
    nb.activeCell.model.sharedModel.setSource(src);
    app.commands.execute('notebook:run-cell');
}}"""

# Colour helpers: parse a computed colour, blend, the background an element is drawn on (the
# first opaque background up its ancestors, translucent ones blended over it), and the WCAG 2
# contrast ratio from relative luminance.
_COLOURS = """
const parse = s => {
    let m = s.match(/^rgba?\\(([^)]*)\\)/);
    if (m) { const p = m[1].split(/[\\s,\\/]+/).filter(x => x).map(Number);
             return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
    m = s.match(/^color\\(srgb ([^)]*)\\)/);
    if (m) { const p = m[1].split(/[\\s\\/]+/).filter(x => x).map(Number);
             return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1]; }
    return null;
};
const over = (top, below) => [0, 1, 2].map(i => top[i] * top[3] + below[i] * (1 - top[3]));
const backgroundOf = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let bg = [255, 255, 255];
    for (const l of layers.reverse()) bg = over(l, bg);
    return bg;
};
const luminance = c => {
    const f = v => {
        v /= 255;
        return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
};
const contrast = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
};
"""

BACKGROUND_OF = f"el => {{ {_COLOURS} return backgroundOf(el); }}"

# Every visible element with its own text inside the `%ipu` outputs (any class starting with
# ipu-, and pandas' tables of %ipu compare): its nearest ipu- class, text, colours, contrast.
CONTRAST = f"""() => {{
    {_COLOURS}
    const roots = [...document.querySelectorAll(
        '.jp-OutputArea-output [class*="ipu-"], .jp-OutputArea-output table.dataframe')];
    const seen = new Set();
    const out = [];
    for (const root of roots) for (const el of [root, ...root.querySelectorAll('*')]) {{
        if (seen.has(el)) continue;
        seen.add(el);
        const text = [...el.childNodes].filter(n => n.nodeType === 3)
            .map(n => n.textContent).join('').trim();
        if (!text || el.getClientRects().length === 0) continue;
        const style = getComputedStyle(el);
        if (style.visibility === 'hidden' || style.display === 'none') continue;
        const isSvg = el instanceof SVGElement;
        const fg = parse(isSvg ? style.fill : style.color);
        if (!fg) continue;
        const bg = backgroundOf(el);
        const owner = el.closest('[class*="ipu-"], table.dataframe');
        const cls = owner.classList.contains('dataframe') ? 'dataframe' :
            [...owner.classList].find(c => c.startsWith('ipu-'));
        out.push({{cls, tag: el.tagName.toLowerCase(), text: text.slice(0, 40),
                   fg: fg.map(Math.round), bg: bg.map(Math.round),
                   ratio: contrast(over(fg, bg), bg)}});
    }}
    return out;
}}"""
