"""What the PRM reads at a decision point: the episode's text as token windows, and the numbers
beside the backbone's hidden state. The ground floor of ``prm``: it imports no other wing.

- ``render.py``: an episode as one token sequence with a step tag at every decision point, cut into
  windows; ``prefix_keys`` for episodes that share a prefix.
- ``batch.py``: rendered windows packed into length-bucketed batches.
- ``signals.py``: the base agent's own confidence signals (``Action.signals``, the
  ``proposal_signals`` column) and state features as head inputs.
- ``visible.py``: the proposal's visible form on ProductQA as ``view:`` head inputs
  (``--proposal-features``).
- ``evidence.py``: the proposal checked against the record the sentence encoder retrieves for the question
  (product details, schema values, memory, the SQL's conditions) as ``evidence:`` head inputs
  (``--evidence-features``), and the question's vector (``--question-vector``).
- ``words.py``: which words of a label-free vocabulary the state text holds, as ``word:`` head inputs read alone
  (``--word-features``; a verifier candidate on a plug-in env).
"""
