"""Shared layers composed by the model files (never registered as models themselves).

- inputs: `embeddings.py` (field tables, numeric-group tokens, the history event token),
  `history_window.py` (the history keys of a batch; cut to `history_len`), `history_select.py`
  (most-recent / hard-search selections);
- feed-forward: `mlp.py` (the ReLU MLP), `swiglu.py` (the one SwiGLU and its gate/up normalisations),
  `heads.py` (prediction head);
- interaction and sequence layers: `wukong.py`, `hstu.py` (with its CPU kernels `pointwise_attention.py` and
  `table_lookup.py`), `history_branch.py`, `masked_attention.py`, `token_mixing.py` (RankMixer),
  `helix_encoder.py`; `attention_kernel.py` (the softmax-attention kernel);
- `request_reuse.py`: the one implementation of the `reuse_requests` switch;
- `config_checks.py`: value checks shared by the model configs.
"""
