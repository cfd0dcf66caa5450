"""The Gumiho visualiser's user interface. It uses only the public gumiho_core API.

    layout      build_demo(): the page's components (gr.Blocks)
    events      which handler each event calls; the generate API endpoint
    handlers    one function per event
    animation   play(): pictures stage by stage, steps computed as the animation reaches them
    screen      picture(): every output for the step on screen
    view        the components handlers update (View, News)
    settings    the Run form as one value (Form) -> a checked Request; the page's tree menu and method choices
    state       the data the page shows: per user the recorded run and the view on it; the server's status
    stages      the pictures of one step, in order
    runfile     export and load of runs as JSON (runschema: the file, with the race's lanes from version 2)
    messages    what a visitor may see of an error
    backend/    what all visitors share: models (loaded once), the auto tree, live runs, the step lock;
                starting and advancing runs (no Gradio)
    render/     pure pictures and words: tree SVG, coloured text, charts, numbers, captions, status lines
"""
