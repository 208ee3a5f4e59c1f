"""Small, complete examples of what a user plugs into helpgate.

- ``arith_chain``: a plug-in environment (``make_episodes``) and its base agent (``make_agent``),
  run by name: ``--env examples.arith_chain:make_episodes --agent examples.arith_chain:make_agent``.
- ``plain_cue``: stepping stones whose risk is said mid-sentence, a base agent that slips with a known
  probability, and ``plain_cue_optimum``: the exact budgeted optimum by brute force (and as a gate).
- ``plain_cue_sparse``: the same rivers paid only at the end (one reward, at the last crossing made).
- ``rapids``: a river whose last crossings are mostly dangerous, so when to help matters, and
  ``rapids_optimum``: its exact budgeted optimum against the best static threshold under the same cap.
- ``tiered_rapids``: the same river with three kinds of help (extra compute, a stronger model, a human), each
  of known catch and price, so which help to call matters, and ``tiered_rapids_optimum``: the exact optimum
  under each cost budget and the best helper of a single kind (``tabular_rl.tiered``).
"""
