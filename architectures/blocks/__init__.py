"""Shared layers composed by the model files (never registered as models themselves).

- inputs: `embeddings.py` (field tables, numeric-group tokens, the history event token),
  `history_window.py` (the history keys of a batch; cut to `history_len`), `history_select.py`
  (most-recent / hard-search selections);
- feed-forward: `mlp.py` (the ReLU MLP), `swiglu.py` (the one SwiGLU and its gate/up normalisations),
  `heads.py` (prediction head);
- interaction and sequence layers: `wukong.py`, `hstu.py`, `history_branch.py`, `fusion.py`,
  `masked_attention.py`, `token_mixing.py` (RankMixer), `mptf.py`, `helix_encoder.py`;
- `request_reuse.py`: the one implementation of the `reuse_requests` switch;
- `config_checks.py`: value checks shared by the model configs.
"""
