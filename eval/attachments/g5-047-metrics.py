import numpy as np

def preprocess_logits_for_metrics(logits, labels):
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)

def compute_metrics(eval_pred):
    preds, labels = eval_pred
    mask = labels != -100
    correct = (preds == labels) & mask
    return {"token_acc": float(correct.sum() / mask.sum())}

# trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
#                   compute_metrics=compute_metrics,
#                   preprocess_logits_for_metrics=preprocess_logits_for_metrics)
# eval output: {'eval_loss': 0.912, 'eval_token_acc': 0.031, ...}
