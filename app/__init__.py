"""The Gumiho visualiser's user interface. It uses only the public gumiho_core API.

    palette     one look (colour, tag, name) per proposer
    tree_view   the draft tree as SVG, stage by stage
    text_view   the answer coloured by origin, and the legend
    charts      plotly charts of speed, speedup and acceptance
    explain     captions, big numbers, "How it works"
    stats       the numbers behind them
    state       per-user data: the recorded run and the view on it
    runfile     export and load of runs as JSON
    settings    form values -> validated configs; tree presets
    runner      models (loaded once), starting and advancing runs, the API endpoint
    ui          build_demo(): the page and its events
"""
