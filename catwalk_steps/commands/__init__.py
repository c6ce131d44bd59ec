"""The console commands: `catwalk-export` (:mod:`.export`), `catwalk-worker` (:mod:`.worker`),
`catwalk-clear-step` (:mod:`.clear_step`). Each fails in one line on stderr, exit status 1."""
