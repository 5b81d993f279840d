"""The dashboard: server-rendered pages under ``/ui``, signed in with a project token.

Every page leads with a chart (Plotly, served from the installed ``plotly`` package) and keeps its numbers in
plain HTML tables that read without JavaScript. Pages only ever show the signed-in token's project.
"""
