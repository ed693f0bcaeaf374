"""What the study chooses and freezes before testing it (``study/registration.json``: the warning and forecaster;
``study/newtasks_registration.json``: the new task families), and the policy that reports a held-out run only under
a registration committed before it."""
