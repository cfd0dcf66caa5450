"""The pictures and words of the page, as pure functions of a run (no Gradio, no models): the draft tree
as SVG, the coloured text and legend, the charts and the numbers behind them, captions and "How it works",
and the status lines."""
