"""The worker's live plan page: ``index.html``, ``plan.css`` and ``plan.js``, package data that
:mod:`processors.runtime.web_pages` serves at ``/`` (no Python here)."""
