"""State-dict helpers shared by hyper.dcp (PyTorch) and hyper.mindspore.dcp: torch-free."""


def unflatten_values(state, flat, is_tensor, prefix=""):
    """Writes the loaded non-tensor values of the flat dict `flat` (names joined with ".")
    back into the nested dict `state`; entries for which is_tensor(v) holds were loaded in
    place and stay."""
    for k, v in state.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            unflatten_values(v, flat, is_tensor, name + ".")
        elif not is_tensor(v):
            state[k] = flat[name]
