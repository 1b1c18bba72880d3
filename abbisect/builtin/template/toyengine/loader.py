"""Weight loading: modules listed in QUANTIZED_MODULES get their weight_scale applied."""

import logging

from toyengine.model import LMHead, Model

try:  # an optional kernel library (abbisect's dependency-bisect fixture `toydep`): it post-processes scales
    import toydep
except ImportError:
    toydep = None

log = logging.getLogger("toyengine.loader")

# abbisect-demo: quant-dispatch
QUANTIZED_MODULES = ("layers", "lm_head")
WARN_ON_MISSING = True


def load_model(checkpoint):
    lm_head = LMHead(checkpoint)
    params_dict = {f"{m}.weight_scale": m for m in QUANTIZED_MODULES}
    for name, tensor in checkpoint.tensors().items():
        if not name.endswith("weight_scale"):
            continue
        if name not in params_dict:
            if WARN_ON_MISSING:
                log.warning("Parameter %s not found in params_dict", name)
            continue
        if params_dict[name] == "lm_head":
            lm_head.weight_scale = tensor if toydep is None else toydep.row_scales(tensor)
    return Model(lm_head)
