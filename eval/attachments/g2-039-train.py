model.train()
optimizer.zero_grad()
for i, (x, y) in enumerate(train_loader):
    logits, loss = model(x.to(device), y.to(device))
    loss.backward()
    running += loss.item()
    if (i + 1) % grad_accum_steps == 0:          # grad_accum_steps = 16 (was 4)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        log({"loss": running, "lr": scheduler.get_last_lr()[0]})
        running = 0.0
