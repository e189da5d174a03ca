import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer

name = "mistralai/Mistral-7B-v0.1"
tok = AutoTokenizer.from_pretrained(name)
model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float16).cuda()
model.gradient_checkpointing_enable()

opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
loader = DataLoader(train_ds, batch_size=2, shuffle=True, collate_fn=collate)

model.train()
for step, batch in enumerate(loader):
    batch = {k: v.cuda() for k, v in batch.items()}
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(step, loss.item())
# step 0 -> 1.93
# step 1 -> nan
