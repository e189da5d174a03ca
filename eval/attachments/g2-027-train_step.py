scaler = torch.cuda.amp.GradScaler()

for it, (x, y) in enumerate(loader):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    scaler.scale(loss).backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)  # grad_clip = 1.0
    scaler.step(optimizer)
    scaler.update()
    if it % 100 == 0:
        print(f"it {it} loss {loss.item():.3f} gnorm {gn.item():.1f} scale {scaler.get_scale()}")
# it 0 loss 10.912 gnorm 712403.5 scale 65536.0
# it 100 loss 10.874 gnorm 698114.0 scale 65536.0
# it 200 loss 10.861 gnorm 701552.2 scale 131072.0
