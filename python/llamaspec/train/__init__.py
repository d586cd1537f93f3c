"""Training drafter heads for llamaspec (needs PyTorch: ``pip install 'llamaspec[train]'``).

Nothing here is imported by the runtime: ``import llamaspec`` never loads torch.
"""
