"""What is checked before anything runs: `catwalk::train`'s settings when the step graph is
built (:mod:`.training`), `catwalk::evaluate`'s and the reports' (:mod:`.evaluation`), the
trackers among the callbacks (:mod:`.trackers`), and the warnings logged when training starts
(:mod:`.start_warnings`). Each error is one line that names the key."""
